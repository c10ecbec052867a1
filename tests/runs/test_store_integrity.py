"""Run-store integrity (issue 15): checkpoints verify the metric lines they cover, disk
estimates cover what a run writes, and a non-finite weight or loss is divergence in every lab."""

from __future__ import annotations

import dataclasses
import hashlib
import json

import pandas as pd
import pytest

from stagewise.config import deep_merge, resolve
from stagewise.labs import RunSpec, get_lab, registry
from stagewise.orchestrate import execute, prepare
from stagewise.runs import Checkpoints, MetricSink, RunDirContext
from stagewise.testing.checks import kill_after

NTP = get_lab("ntp")
FAST_NTP = dataclasses.replace(NTP, make_figures=lambda *a: [])  # the runs' figures are not what is tested here
SMALL = {"seed": 5, "n_seeds": 3, "data": {"vocab_size": 6, "max_len": 5},
         "model": {"init": "random"}, "train": {"steps_stage1": 20, "steps_stage2": 40, "checkpoint_every": 7}}
CRASH_STEP = 45  # checkpoints at steps 35 and 42 are kept (keep = 2) when the run is killed here


def small_config(**extra):
    return resolve(NTP.Config, deep_merge(SMALL, extra))


def run_to_end(folder, config, lab=FAST_NTP):
    paths = prepare(lab, config, folder)
    execute(lab, config, paths, progress=False)
    return paths


def crashed_run(folder, config, monkeypatch, at=CRASH_STEP, lab=FAST_NTP):
    """Run ``config`` and kill it (KeyboardInterrupt) right after it logs step ``at``."""
    paths = prepare(lab, config, folder)
    with kill_after(step=at), pytest.raises(KeyboardInterrupt):
        execute(lab, config, paths, progress=False)
    return paths


def checkpoint_records(paths) -> list[dict]:
    """The metas of the kept checkpoints (with their ``step``), oldest first."""
    store = Checkpoints(paths.checkpoints)
    return [{**meta, "step": step} for _, step, _, meta in map(store.read, store.list())]


def alter_line(paths, index: int) -> None:
    """Rename the metric ``train.loss`` to ``train.lpss`` in line ``index`` of metrics.jsonl
    (one character; the line stays valid JSON)."""
    lines = paths.metrics_jsonl.read_bytes().splitlines(keepends=True)
    assert b'"train.loss"' in lines[index]
    lines[index] = lines[index].replace(b'"train.loss"', b'"train.lpss"', 1)
    paths.metrics_jsonl.write_bytes(b"".join(lines))


def assert_same_metrics(paths, reference) -> None:
    frame = pd.read_parquet(paths.metrics)
    assert not frame["metric"].str.contains("lpss").any()
    pd.testing.assert_frame_equal(frame, reference, check_exact=True)


@pytest.fixture(scope="module")
def reference(run_cache):
    """metrics.parquet of the uninterrupted small run (the session cache's)."""
    return pd.read_parquet(run_cache.path(RunSpec(lab="ntp", overrides=SMALL)) / "metrics.parquet")


# ------------------------------------------------------------- 1. stream digests
def test_sink_cover_is_the_sha256_of_the_file_and_survives_a_cut(tmp_path):
    sink = MetricSink(tmp_path / "m.jsonl", [0, 1])
    for step in range(6):
        sink.log(step, {"loss": [step, -step], "acc": [0.5, 1.0]})
    sink.flush()
    blob = sink.path.read_bytes()
    assert sink.cover() == {"_lines": 6, "_bytes": len(blob), "_sha256": hashlib.sha256(blob).hexdigest()}
    sink.close()
    with open(sink.path, "ab") as handle:
        handle.write(b'{"step": 6, "names": ["lo')  # a kill mid-write
    sink.truncate_lines(4)  # the running state is rebuilt from the kept bytes
    sink.log(9, {"loss": [1.0, 2.0], "acc": [0.0, 0.0]})
    sink.flush()
    blob = sink.path.read_bytes()
    assert blob.startswith(b"".join(blob.splitlines(keepends=True)[:4]))
    assert sink.cover() == {"_lines": 5, "_bytes": len(blob), "_sha256": hashlib.sha256(blob).hexdigest()}
    reopened = MetricSink(sink.path, [0, 1])  # opening an existing stream hashes its complete lines
    assert reopened.cover() == sink.cover()
    reopened.close()
    sink.close()


def test_checkpoints_record_the_covered_bytes(tmp_path, monkeypatch):
    paths = crashed_run(tmp_path / "crash", small_config(), monkeypatch)
    blob = paths.metrics_jsonl.read_bytes()
    records = checkpoint_records(paths)
    assert len(records) == 2 and records[0]["_lines"] < records[1]["_lines"]
    for meta in records:
        covered = blob[:meta["_bytes"]]
        assert covered.count(b"\n") == meta["_lines"] and covered.endswith(b"\n")
        assert hashlib.sha256(covered).hexdigest() == meta["_sha256"]


def test_altered_character_in_newest_range_falls_back_to_older_checkpoint(tmp_path, monkeypatch, reference):
    paths = crashed_run(tmp_path / "crash", small_config(), monkeypatch)
    older, newest = checkpoint_records(paths)
    alter_line(paths, newest["_lines"] - 1)  # the newest checkpoint's own last line; the older does not cover it
    execute(FAST_NTP, small_config(), paths, resume=True, progress=False)
    assert_same_metrics(paths, reference)
    note = json.loads(paths.manifest.read_text())["notes"]["resume_fallback"]
    assert note["resumed_from"] == f"step {older['step']} of group 0"
    assert len(note["passed_over"]) == 1 and "digest" in note["passed_over"][0]


def test_altered_character_covered_by_every_checkpoint_starts_fresh(tmp_path, monkeypatch, reference):
    paths = crashed_run(tmp_path / "crash", small_config(), monkeypatch)
    alter_line(paths, 1)
    execute(FAST_NTP, small_config(), paths, resume=True, progress=False)
    assert_same_metrics(paths, reference)
    note = json.loads(paths.manifest.read_text())["notes"]["resume_fallback"]
    assert note["resumed_from"] == "a fresh start" and len(note["passed_over"]) == 2


def test_torn_stream_after_the_newest_range_resumes_from_it(tmp_path, monkeypatch, reference):
    paths = crashed_run(tmp_path / "crash", small_config(), monkeypatch)
    older, newest = checkpoint_records(paths)
    blob = paths.metrics_jsonl.read_bytes()
    lines = blob.splitlines(keepends=True)
    assert len(lines) > newest["_lines"] + 1  # steps logged after the newest checkpoint
    torn = blob[:newest["_bytes"]] + lines[newest["_lines"]].replace(b'"train.loss"', b'"train.lpss"', 1) + b'{"step": 99, "na'
    paths.metrics_jsonl.write_bytes(torn)
    ctx = RunDirContext(paths, small_config().seed_list(), 7, False)
    state = ctx.prepare_resume()
    assert state.step == newest["step"] and paths.metrics_jsonl.read_bytes() == blob[:newest["_bytes"]]
    ctx.sink.close()
    execute(FAST_NTP, small_config(), paths, resume=True, progress=False)
    assert_same_metrics(paths, reference)


def test_checkpoints_without_a_digest_resume_by_line_count(tmp_path, monkeypatch, reference):
    """Checkpoints written before the digest existed record only ``_lines``."""
    paths = crashed_run(tmp_path / "crash", small_config(), monkeypatch)
    store = Checkpoints(paths.checkpoints)
    for path in store.list():
        group, step, tensors, meta = store.read(path)
        path.unlink()
        store.save(step, tensors, {k: v for k, v in meta.items() if k not in ("_bytes", "_sha256")}, group=group)
    execute(FAST_NTP, small_config(), paths, resume=True, progress=False)
    assert_same_metrics(paths, reference)
    assert "resume_fallback" not in (json.loads(paths.manifest.read_text()).get("notes") or {})


def test_cli_resume_after_altered_line(cli, tmp_path, monkeypatch, reference):
    """`stagewise run --resume` of a killed run with one altered covered character ends
    with the uninterrupted run's metrics."""
    paths = crashed_run(tmp_path / "crash", small_config(), monkeypatch)
    alter_line(paths, checkpoint_records(paths)[1]["_lines"] - 2)
    monkeypatch.setitem(registry.REGISTRY._labs, "ntp", FAST_NTP)
    code, _, stderr = cli("run", "--resume", str(paths.root), "-q")
    assert code == 0, stderr
    assert_same_metrics(paths, reference)


# --------------------------------------------------------------------- 3. divergence
def diverged_manifest(cli, folder, *args: str) -> dict:
    """`stagewise run ARGS --out folder`: exit code 3 and the manifest of a diverged run."""
    code, _, stderr = cli("run", *args, "--out", str(folder), "-q")
    assert code == 3, stderr
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["status"] == "diverged" and set(manifest["diverged"]) == {"step", "seed", "what"}
    assert manifest["diverged"]["seed"] in manifest["seeds"] and manifest["diverged"]["step"] >= 0
    return manifest


def test_ntp_gd_with_huge_step_exits_3(cli, tmp_path):
    """The reported command: W_ov ~ 1e298 after one step, finite entries but an overflowing norm."""
    manifest = diverged_manifest(cli, tmp_path / "gd", "ntp", "--preset", "gd", "--set", "train.lr_stage1=1e300",
                                 "--set", "train.steps_stage1=12", "--set", "train.steps_stage2=24")
    assert manifest["diverged"]["step"] == 1 and "wov" in manifest["diverged"]["what"]


@pytest.mark.parametrize("sets", [
    ["train.optimizer=normalized_gd"],
    ["train.optimizer=adam"],
    ["train.optimizer=adamw", "train.weight_decay=0.01"],
    ["train.algorithm=joint"],
    ["train.algorithm=joint", "train.optimizer=gd"],
    ["model.factored=true", "model.init=random", "train.optimizer=gd"],
    ["model.dtype=float32", "train.optimizer=adam", "train.lr_stage1=1e30"],
])
def test_ntp_every_training_path_diverges(cli, tmp_path, sets):
    args = ["ntp", "--preset", "example1", "--seeds", "2", "--set", "train.lr_stage1=1e300", "--set", "train.lr_stage2=1e300",
            "--set", "train.steps_stage1=6", "--set", "train.steps_stage2=6"]
    diverged_manifest(cli, tmp_path / "r", *args, *[x for s in sets for x in ("--set", s)])


@pytest.mark.parametrize("kind", ["two-stage", "ablations", "grid", "spectral"])
def test_disentangled_every_experiment_diverges(cli, tmp_path, kind):
    args = ["disentangled", "--seeds", "2", "--set", f"experiment.kind={kind}", "--set", "data.d=6",
            "--set", "data.prompt_len=6", "--set", "data.n_train=40", "--set", "data.n_test=60",
            "--set", "train.steps=20", "--set", "train.t1=8", "--set", "train.log_every=5",
            "--set", "train.spectrum_every=10", "--set", "train.lr_stage1=1e300", "--set", "train.lr_stage2=1e300"]
    diverged_manifest(cli, tmp_path / "r", *args)


LM_ONE_STEP = ["lm", "--set", "task.name=counterfact", "--set", "model.compact_vocab=true",
               "--set", "model.tiny.n_layer=1", "--set", "model.tiny.n_embd=32", "--set", "model.tiny.n_head=2",
               "--set", "train.epochs=1", "--set", "train.batch_size=64", "--set", "train.log_every=1"]


@pytest.mark.parametrize("optimizer,lr", [("sgd", 1e30), ("adamw", 1e30)])
def test_lm_weights_that_break_on_the_last_step_are_divergence(cli, tmp_path, optimizer, lr):
    """One optimizer step: the loss it was taken on is finite, the weights after it are not."""
    manifest = diverged_manifest(cli, tmp_path / "r", *LM_ONE_STEP, "--set", f"train.optimizer={optimizer}",
                                 "--set", f"train.lr={lr}")
    assert manifest["diverged"]["step"] == 1 and manifest["diverged"]["what"].startswith("weights")


# ------------------------------------------------------------------ 2. disk estimates
NTP_SMOKE, DIS_SMOKE, LM_SMOKE = (get_lab(name).smoke for name in ("ntp", "disentangled", "lm"))
LM_SMALL = {"model": {"tiny": {"n_layer": 1, "n_embd": 16, "n_head": 2}}, "task": {"limits": {"blimp": 3, "sick": 6}},
            "train": {"epochs": 3, "batch_size": 4}}
DISK_CASES = [  # (lab, preset, overrides): smoke sizes of every lab, several presets
    ("ntp", None, NTP_SMOKE),
    ("ntp", "compare", {"n_seeds": 2, "data": {"vocab_size": 8}, "train": {"steps_stage1": 30, "steps_stage2": 60}}),
    ("ntp", "adam", deep_merge(NTP_SMOKE, {"n_seeds": 3})),
    ("disentangled", None, DIS_SMOKE),
    ("disentangled", None, deep_merge(DIS_SMOKE, {"experiment": {"kind": "grid"}})),
    ("disentangled", None, deep_merge(DIS_SMOKE, {"experiment": {"kind": "ablations", "ablations": ["joint", "no-noise"]}})),
    ("lm", None, LM_SMOKE),
    ("lm", "blimp-sick-tiny", LM_SMALL),
    ("lm", "blimp-sick-tiny-lm", LM_SMALL),
]
LARGER = [  # more seeds and steps than the smoke runs: the estimate is not tuned to one size
    ("disentangled", None, deep_merge(DIS_SMOKE, {"n_seeds": 6, "train": {"steps": 400, "t1": 150, "log_every": 2}})),
    pytest.param("ntp", "paper", {"n_seeds": 8, "train": {"steps_stage1": 300, "steps_stage2": 900, "log_every": 2}},
                 marks=pytest.mark.slow),
]
ESTIMATE_BAND = 1.25  # the estimate lies in [peak written, 1.25 x final folder]
EXACT_STREAM = ("ntp", "disentangled")  # labs whose estimate counts the stream's bytes exactly


def folder_bytes(root) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def written_sizes(lab_name, preset, overrides, folder, monkeypatch) -> tuple[int, int]:
    """(peak, final) bytes of the run folder: every atomic write (all files but the stream)
    is watched, with the temporary copy it makes next to the file it replaces."""
    import stagewise.report.plots as plots
    import stagewise.runs.atomic as atomic
    import stagewise.runs.store as store
    import stagewise.runs.stream as stream

    original = atomic.atomic_write_bytes
    peak = {"bytes": 0}

    def watched(path, data):
        if folder.exists():
            peak["bytes"] = max(peak["bytes"], folder_bytes(folder) + len(data))
        original(path, data)
        peak["bytes"] = max(peak["bytes"], folder_bytes(folder))

    for module in (atomic, store, stream, plots):
        monkeypatch.setattr(module, "atomic_write_bytes", watched)
    lab = get_lab(lab_name)
    config = resolve(lab.Config, deep_merge(lab.presets[preset][1] if preset else {}, overrides))
    paths = prepare(lab, config, folder)
    execute(lab, config, paths, progress=False)
    monkeypatch.undo()
    final = folder_bytes(folder)
    return max(peak["bytes"], final), final


def estimate_parts(lab_name, preset, overrides):
    import importlib

    lab = get_lab(lab_name)
    config = resolve(lab.Config, deep_merge(lab.presets[preset][1] if preset else {}, overrides))
    return lab.estimate(config), importlib.import_module(f"stagewise.labs.{lab_name}.resources").disk_budget(config)


@pytest.mark.parametrize("lab_name,preset,overrides", DISK_CASES + LARGER)
def test_disk_estimate_covers_what_a_run_writes(tmp_path, monkeypatch, lab_name, preset, overrides):
    est, budget = estimate_parts(lab_name, preset, overrides)
    peak, final = written_sizes(lab_name, preset, overrides, tmp_path / "r", monkeypatch)
    assert peak <= est.disk_bytes <= ESTIMATE_BAND * final, (est.disk_bytes, peak, final, budget.parts)
    assert est.disk_bytes == budget.peak
    if lab_name in EXACT_STREAM:  # the stream line by line, names and all
        assert budget.parts["metrics.jsonl"] == (tmp_path / "r" / "metrics.jsonl").stat().st_size


def test_ntp_estimate_names_the_logged_metrics(tmp_path):
    """The names the NTP estimate counts are those a run logs (test.acc.covered at suite steps)."""
    from stagewise.labs.ntp.resources import LOGGED_METRICS, SUITE_METRICS

    frame = pd.read_parquet(run_to_end(tmp_path / "r", small_config()).metrics)
    assert set(frame["metric"]) == set(LOGGED_METRICS) | set(SUITE_METRICS)


def test_disk_estimate_refuses_a_run_that_cannot_fit(cli, tmp_path, monkeypatch):
    """A run whose folder would not fit is refused up front: one line, exit 2, nothing made."""
    import shutil

    import stagewise.orchestrate.runner as runner
    from stagewise.config import resolve as resolve_config

    config = resolve_config(NTP.Config, deep_merge(NTP.presets["example1"][1], {}))
    need = NTP.estimate(config).disk_bytes
    usage = shutil.disk_usage(tmp_path)
    fake = usage._replace(free=int(need / 0.95))  # the metric stream alone would fit; the whole folder does not
    monkeypatch.setattr(runner.shutil, "disk_usage", lambda path: fake)
    code, _, stderr = cli("run", "ntp", "--preset", "example1", "--out", str(tmp_path / "r"))
    assert code == 2 and stderr.strip().startswith("error: ") and len(stderr.strip().splitlines()) == 1
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("lab_name,overrides", [
    ("ntp", {"n_seeds": 3, "train": {"steps_stage1": 250, "steps_stage2": 500}}),
    ("ntp", {"train": {"steps_stage1": 90, "steps_stage2": 300, "log_every": 7}}),
    ("disentangled", {"train": {"steps": 700, "t1": 130, "log_every": 7, "spectrum_every": 25}}),
    ("disentangled", {"experiment": {"kind": "grid"}, "train": {"steps": 300, "t1": 100, "log_every": 4, "spectrum_every": 6}}),
])
def test_long_run_stream_bound_covers_the_exact_count(monkeypatch, lab_name, overrides):
    """Past EXACT_LINES logged steps the stream is bounded from counts alone (no step list:
    a 10^9-step config is estimated in milliseconds); the bound is >= the exact count."""
    import importlib

    module = importlib.import_module(f"stagewise.labs.{lab_name}.resources")
    lab = get_lab(lab_name)
    config = resolve(lab.Config, deep_merge(lab.presets[next(iter(lab.presets))][1], overrides))
    exact = module.disk_budget(config)
    monkeypatch.setattr(module, "EXACT_LINES", 0)
    bound = module.disk_budget(config)
    for part in ("metrics.jsonl", "metrics.parquet"):  # the same lines (NTP: the suite's at most once per interval)
        assert exact.parts[part] <= bound.parts[part] <= 1.1 * exact.parts[part], part
