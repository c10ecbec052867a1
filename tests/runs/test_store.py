"""The run store: layout, atomic files, failure records, and resume == uninterrupted; an --out
that cannot be a run folder, a damaged manifest or a missing config.yaml is one line; every file
has the same mode; CSV tables are quoted against spreadsheet formulas; a folder left by a
prepare killed between its writes is taken."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import signal
import stat
import subprocess
import sys
import time

import pandas as pd
import pytest
import yaml

from runcache import EXAMPLE1_SHORT
from stagewise.config import resolve
from stagewise.labs import RunSpec, get_lab
from stagewise.engine import Diverged
from stagewise.orchestrate import execute, prepare
from stagewise.runs import MetricSink, RunDirContext

LAB = get_lab("ntp")
FAST = dataclasses.replace(LAB, make_figures=lambda *a: [])  # resume tests: the figures are not what is tested
SMALL = {"seed": 5, "n_seeds": 3, "data": {"vocab_size": 6, "max_len": 5},
         "model": {"init": "random"}, "train": {"steps_stage1": 20, "steps_stage2": 40, "checkpoint_every": 7}}


def small_config(**extra):
    from stagewise.config import deep_merge

    return resolve(LAB.Config, deep_merge(SMALL, extra))


@pytest.fixture(scope="module")
def reference(run_cache):
    """metrics.parquet of the uninterrupted SMALL run (the session cache's, shared with test_store_integrity)."""
    return pd.read_parquet(run_cache.path(RunSpec(lab="ntp", overrides=SMALL)) / "metrics.parquet")


def run_to_end(tmp_path, name, config):
    paths = prepare(LAB, config, tmp_path / name)
    execute(LAB, config, paths, progress=False)
    return paths


def test_layout_and_schema(tmp_path):
    paths = run_to_end(tmp_path, "r", small_config())
    manifest = json.loads(paths.manifest.read_text())
    assert manifest["status"] == "done" and manifest["seeds"] == [5, 6, 7]
    assert {"config_hash", "versions", "git_sha", "started", "ended", "error"} <= set(manifest)
    assert yaml.safe_load(paths.config.read_text())["n_seeds"] == 3
    frame = pd.read_parquet(paths.metrics)
    assert list(frame.columns) == ["step", "seed", "variant", "metric", "value"]
    assert str(frame["step"].dtype) == "int64" and str(frame["value"].dtype) == "float64"
    steps = sorted(frame["step"].unique())
    assert steps == list(range(0, 61))
    stage = frame[frame["metric"] == "stage"].set_index(["step", "seed"])["value"]
    assert stage.loc[(20, 5)] == 1 and stage.loc[(21, 5)] == 2
    summary = json.loads(paths.summary.read_text())
    assert {"schema_version", "lab", "seeds", "claims", "final", "per_seed", "details", "sources"} == set(summary)
    assert {c["source"]["paper"] for c in summary["claims"] if c["source"]["kind"] == "paper"} <= set(summary["sources"])
    assert {"rates", "wkq_star_norm_sq"} <= set(summary["details"])
    assert manifest["tables"]["generalization"]["path"] == "tables/generalization.parquet"
    assert (paths.tables / "generalization.parquet").exists()
    assert (paths.figures / "figure2.png").exists() and (paths.figures / "figure2.pdf").exists()
    assert list(paths.checkpoints.glob("*.safetensors"))
    assert not list(paths.root.rglob("*.tmp"))


def test_out_dir_must_be_new(tmp_path):
    from stagewise.errors import UserError

    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "f").write_text("keep me")
    with pytest.raises(UserError):
        prepare(LAB, small_config(), tmp_path / "x")
    assert (tmp_path / "x" / "f").read_text() == "keep me"


@pytest.mark.parametrize("crash_at", [3, 25, 60])
def test_resume_after_crash_equals_uninterrupted(tmp_path, monkeypatch, crash_at, reference):
    config = small_config()

    original = RunDirContext.log

    def crashing_log(self, step, values, **kw):
        original(self, step, values, **kw)
        if step == crash_at:
            raise KeyboardInterrupt("simulated kill")

    paths = prepare(FAST, config, tmp_path / "crash")
    monkeypatch.setattr(RunDirContext, "log", crashing_log)
    with pytest.raises(KeyboardInterrupt):
        execute(FAST, config, paths, progress=False)
    assert json.loads(paths.manifest.read_text())["status"] == "interrupted"
    partial = pd.read_parquet(paths.metrics)  # what was logged so far is kept
    assert partial["step"].max() == crash_at
    monkeypatch.setattr(RunDirContext, "log", original)
    execute(FAST, config, paths, resume=True, progress=False)
    assert json.loads(paths.manifest.read_text())["status"] == "done"
    resumed = pd.read_parquet(paths.metrics)
    pd.testing.assert_frame_equal(resumed, reference, check_exact=True)


@pytest.mark.slow
def test_resume_after_sigkill(tmp_path):
    """A real `kill -9` of the CLI at an arbitrary moment, then `stagewise run --resume`."""
    out = tmp_path / "killed"
    args = ["run", "ntp", "--preset", "paper", "--seeds", "2", "--set", "data.vocab_size=8",
            "--set", "train.steps_stage1=150", "--set", "train.steps_stage2=250", "--set", "train.checkpoint_every=40"]
    proc = subprocess.Popen([sys.executable, "-m", "stagewise.cli", *args, "--out", str(out), "-q"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    jsonl = out / "metrics.jsonl"
    deadline = time.time() + 60
    while time.time() < deadline:
        if jsonl.exists() and jsonl.stat().st_size > 0 and jsonl.read_bytes().count(b"\n") > 130:
            break
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert json.loads((out / "manifest.json").read_text())["status"] == "running"
    done = subprocess.run([sys.executable, "-m", "stagewise.cli", "run", "--resume", str(out), "-q"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    ref = tmp_path / "ref"
    done = subprocess.run([sys.executable, "-m", "stagewise.cli", *args, "--out", str(ref), "-q"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    pd.testing.assert_frame_equal(pd.read_parquet(out / "metrics.parquet"), pd.read_parquet(ref / "metrics.parquet"),
                                  check_exact=True)


def test_divergence_is_recorded(tmp_path, monkeypatch):
    from stagewise.labs.ntp import train as train_mod

    original = train_mod.check_finite

    def fake_check(step, seeds, values=None, weights=None):
        if step == 4:
            raise Diverged(step, seeds[1], "loss is not finite")
        original(step, seeds, values, weights)

    monkeypatch.setattr(train_mod, "check_finite", fake_check)
    config = small_config()
    paths = prepare(LAB, config, tmp_path / "div")
    with pytest.raises(Diverged):
        execute(LAB, config, paths, progress=False)
    manifest = json.loads(paths.manifest.read_text())
    assert manifest["status"] == "diverged" and manifest["diverged"] == {"step": 4, "seed": 6, "what": "loss is not finite"}
    assert pd.read_parquet(paths.metrics)["step"].max() == 4


def test_real_divergence_with_huge_gd_step(tmp_path):
    config = small_config(train={"optimizer": "gd", "lr_stage1": 1e308, "lr_stage2": 1e308})
    paths = prepare(LAB, config, tmp_path / "div")
    with pytest.raises(Diverged) as err:
        execute(LAB, config, paths, progress=False)
    manifest = json.loads(paths.manifest.read_text())
    assert manifest["status"] == "diverged" and manifest["diverged"]["step"] == err.value.step
    frame = pd.read_parquet(paths.metrics)
    # the weight norms logged are inf exactly when the finite check finds the weights overflowing
    at = frame[(frame["step"] == err.value.step) & frame["metric"].isin(["train.loss", "train.loss.stage1", "W_ov.fro", "W_kq.fro"])]
    bad = at[~at["value"].apply(math.isfinite)]
    assert err.value.seed == int(bad["seed"].min())  # the first seed whose loss or weights broke, not just any seed
    earlier = frame[(frame["step"] < err.value.step) & (frame["metric"] == "train.loss")]
    assert earlier["value"].apply(math.isfinite).all()


def test_sink_skips_torn_line_and_truncates(tmp_path):
    sink = MetricSink(tmp_path / "m.jsonl", [0, 1])
    for step in range(5):
        sink.log(step, {"loss": [step, -step]})
    sink.close()
    with open(tmp_path / "m.jsonl", "a") as handle:
        handle.write('{"step": 5, "names": ["lo')  # a kill mid-write
    assert [line["step"] for line in sink.read_lines()] == [0, 1, 2, 3, 4]
    sink.truncate_lines(3)
    frame = sink.to_frame()
    assert sorted(frame["step"].unique()) == [0, 1, 2] and len(frame) == 6
    assert frame[frame["step"] == 2]["value"].tolist() == [2.0, -2.0]  # exact float64 round trip


# --------------------------------------------------------------------- reliability
def _crash(monkeypatch, at):
    original = RunDirContext.log

    def crashing_log(self, step, values, **kw):
        original(self, step, values, **kw)
        if step == at:
            raise KeyboardInterrupt("simulated kill")

    monkeypatch.setattr(RunDirContext, "log", crashing_log)
    return original


def _crashed_run(tmp_path, monkeypatch, config, at=45):
    paths = prepare(FAST, config, tmp_path / "crash")
    original = _crash(monkeypatch, at)
    with pytest.raises(KeyboardInterrupt):
        execute(FAST, config, paths, progress=False)
    monkeypatch.setattr(RunDirContext, "log", original)
    return paths


def test_metric_stream_cut_after_kill_falls_back_to_older_checkpoint(tmp_path, monkeypatch, reference):
    config = small_config()
    paths = _crashed_run(tmp_path, monkeypatch, config)
    lines = paths.metrics_jsonl.read_text().splitlines(keepends=True)
    paths.metrics_jsonl.write_text("".join(lines[:30]))  # shorter than the newest checkpoint (42 lines) says
    execute(FAST, config, paths, resume=True, progress=False)
    pd.testing.assert_frame_equal(pd.read_parquet(paths.metrics), reference, check_exact=True)


def test_flipped_byte_in_checkpoint_falls_back(tmp_path, monkeypatch, reference):
    config = small_config()
    paths = _crashed_run(tmp_path, monkeypatch, config)
    newest = sorted(paths.checkpoints.glob("*.safetensors"))[-1]
    blob = bytearray(newest.read_bytes())
    blob[-3] ^= 0x10  # inside the tensor data
    newest.write_bytes(bytes(blob))
    ctx = RunDirContext(paths, config.seed_list(), 7, False)
    assert ctx.checkpoints.read(newest) is None  # the checksum catches it
    execute(FAST, config, paths, resume=True, progress=False)
    pd.testing.assert_frame_equal(pd.read_parquet(paths.metrics), reference, check_exact=True)


def test_second_writer_is_refused(tmp_path):
    from stagewise.errors import UserError
    from stagewise.runs import RunLock

    config = small_config()
    paths = prepare(FAST, config, tmp_path / "locked")
    with RunLock(paths.root):
        with pytest.raises(UserError, match="another stagewise process"):
            execute(FAST, config, paths, resume=True, progress=False)
    execute(FAST, config, paths, resume=True, progress=False)  # free again
    assert json.loads(paths.manifest.read_text())["status"] == "done"


@pytest.mark.slow  # three CLI processes (a run, then two resumes at once): ~18 s
def test_concurrent_resume_in_two_processes_one_writer(tmp_path):
    """Two `stagewise run --resume DIR` at once: one runs, the other exits 2 at once."""
    out = tmp_path / "r"
    args = [sys.executable, "-m", "stagewise.cli"]
    first = subprocess.run([*args, "run", "ntp", "--preset", "example1", "--out", str(out), "-q",
                            "--set", "train.steps_stage2=40"], capture_output=True, text=True)
    assert first.returncode == 0, first.stderr
    (out / "manifest.json").write_text(json.dumps({**json.loads((out / "manifest.json").read_text()), "status": "running"}))
    procs = [subprocess.Popen([*args, "run", "--resume", str(out), "-q"], stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    results = [(p.returncode, err) for p in procs for _, err in [p.communicate()]]  # communicate closes the pipes
    codes = sorted(code for code, _ in results)
    assert codes in ([0, 2], [0, 0]), results  # [0, 0]: the first had finished before the second started
    if codes == [0, 2]:
        err = next(e for c, e in results if c == 2)
        assert "another stagewise process" in err and len(err.strip().splitlines()) == 1
    frame = pd.read_parquet(out / "metrics.parquet")
    assert not frame.duplicated(["step", "seed", "metric"]).any()


def test_sigterm_checkpoints_and_records_interrupted(tmp_path):
    out = tmp_path / "term"
    args = [sys.executable, "-m", "stagewise.cli", "run", "ntp", "--preset", "paper", "--seeds", "2",
            "--set", "train.steps_stage1=3000", "--set", "train.steps_stage2=3000", "--set", "train.checkpoint_every=100000",
            "--out", str(out), "-q"]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    jsonl = out / "metrics.jsonl"
    deadline = time.time() + 60
    while time.time() < deadline and not (jsonl.exists() and jsonl.stat().st_size > 20000):
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)  # waits and closes the pipe
    assert proc.returncode == 143, err
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "interrupted" and "SIGTERM" in manifest["error"]
    assert list((out / "checkpoints").glob("*.safetensors"))  # checkpointed at the stop, not at an interval
    assert (out / "metrics.parquet").exists()


def test_tables_replace_parts_and_resume_keeps_only_checkpointed_parts(tmp_path):
    from stagewise.runs import RunPaths

    paths = RunPaths(tmp_path)
    ctx = RunDirContext(paths, [0, 1], 1, False)
    ctx.log_table("preds", pd.DataFrame({"x": [1, 2]}), part=0)
    ctx.log_table("preds", pd.DataFrame({"x": [3]}), part=1)
    ctx.log_table("preds", pd.DataFrame({"x": [4, 5]}), part=1)  # replaces part 1
    assert ctx.tables.get("preds")["x"].tolist() == [1, 2, 4, 5]
    ctx.log(1, {"loss": pd.Series([0.5, 0.25]).pipe(lambda s: __import__("torch").tensor(s.values))})
    ctx.save_checkpoint(1, {"w": __import__("torch").zeros(2)})
    ctx.log_table("preds", pd.DataFrame({"x": [9]}), part=2)  # after the checkpoint
    ctx.sink.close()
    again = RunDirContext(paths, [0, 1], 1, False)
    state = again.prepare_resume()
    assert state.step == 1 and state.meta["_tables"] == {"preds": ["0", "1"]}
    assert again.tables.get("preds")["x"].tolist() == [1, 2, 4, 5]


def test_failure_on_unwritable_dir_is_recorded_as_far_as_possible(tmp_path, monkeypatch):
    """A write error mid-run: the message does not point to an error.log that does not exist."""
    config = small_config()
    paths = prepare(LAB, config, tmp_path / "full")
    import stagewise.orchestrate.runner as ex

    def no_space(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(ex, "write_parquet", no_space)
    monkeypatch.setattr(ex, "atomic_write_text", no_space)
    with pytest.raises(OSError) as err:
        execute(LAB, config, paths, progress=False)
    assert err.value.stagewise_error_log is None and "no error.log" in err.value.stagewise_note
    assert not paths.error_log.exists()
    assert json.loads(paths.manifest.read_text())["status"] == "failed"  # the manifest itself could still be written


# --------------------------------------------------------------------------- hostile or careless input
EXAMPLE = ["run", "ntp", "--preset", "example1", "--set", "train.steps_stage2=20", "-q"]


def one_line(code, stderr, needle):
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and needle in lines[0], (code, lines)


@pytest.mark.parametrize("command", ["run", "reproduce"])
def test_out_that_is_a_file_or_under_a_file_or_unwritable(cli, tmp_path, command):
    (tmp_path / "f").write_text("x")
    args = EXAMPLE[:-1] if command == "run" else ["reproduce", "ntp", "--quick"]
    code, _, err = cli(*args, "--out", str(tmp_path / "f"))
    one_line(code, err, "is a file")
    code, _, err = cli(*args, "--out", str(tmp_path / "f" / "sub"))
    one_line(code, err, "which is a file")
    code, _, err = cli(*args, "--out", "/proc/stagewise-cannot-be-here")
    one_line(code, err, "cannot create the directory")
    assert (tmp_path / "f").read_text() == "x"


@pytest.fixture(scope="module")
def done_run(run_cache):
    """A finished NTP run (the session cache's: read it, copy it to change it)."""
    return run_cache.path(EXAMPLE1_SHORT)


@pytest.mark.parametrize("damage,needle", [
    (lambda p: p.write_text(p.read_text()[:40]), "unreadable manifest"),
    (lambda p: p.write_text("[1, 2]"), "expected an object"),
    (lambda p: p.write_text("{}"), "missing lab, status"),
    (lambda p: p.write_bytes(b"\xff\xfe\x00garbage"), "unreadable manifest"),
])
def test_show_and_resume_on_a_damaged_manifest(cli, tmp_path, done_run, damage, needle):
    import shutil

    run = tmp_path / "r"
    shutil.copytree(done_run, run)
    damage(run / "manifest.json")
    for args in (("show", str(run)), ("run", "--resume", str(run))):
        code, _, err = cli(*args)
        one_line(code, err, needle)


def test_resume_without_config_yaml(cli, tmp_path, done_run):
    import shutil

    run = tmp_path / "r"
    shutil.copytree(done_run, run)
    (run / "config.yaml").unlink()
    code, _, err = cli("run", "--resume", str(run))
    one_line(code, err, "config.yaml is missing")


def test_checkpoints_have_the_same_mode_as_other_files(done_run):
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in done_run.rglob("*") if p.is_file() and p.name != ".lock"}
    assert len(set(modes.values())) == 1, modes
    assert any(name.endswith(".safetensors") for name in modes)


def test_generalization_csv_quotes_token_names(cli, tmp_path):
    data = {"tokens": ["=1+1", "b", "@c"], "samples": [{"input": ["=1+1"], "next": "b"}, {"input": ["b"], "next": "@c"},
                                                      {"input": ["@c"], "next": "=1+1"},
                                                      {"input": ["b", "=1+1"], "next": "b"}]}
    path = tmp_path / "d.json"
    path.write_text(json.dumps(data))
    code, _, err = cli("run", "ntp", "--set", f"data.file={path}", "--set", "train.steps_stage1=20",
                       "--set", "train.steps_stage2=20", "--out", str(tmp_path / "r"), "-q")
    assert code == 0, err
    text = (tmp_path / "r" / "tables" / "generalization.csv").read_text()
    assert "\"'=1+1" in text and ",=1+1" not in text and '"=1+1' not in text
    table = pd.read_parquet(tmp_path / "r" / "tables" / "generalization.parquet")
    assert "=1+1" in set(table["predicted"]) | set(table["expected"]) | set(" ".join(table["input"]).split())


def test_a_folder_left_by_a_prepare_killed_between_its_writes_is_taken(tmp_path):
    """A SIGKILL after config.yaml and before manifest.json (a sweep's worker) leaves a folder
    with this config.yaml only: the rerun takes it (nothing ran there); a folder with another
    config.yaml, or with any other file, is still refused."""
    from stagewise import RunSpec, execute_spec
    from stagewise.config import to_yaml
    from stagewise.errors import UserError
    from stagewise.labs.resolve import spec_config

    spec = RunSpec(lab="ntp", preset="example1", overrides={"train": {"steps_stage2": 20}}, name="r")
    root = tmp_path / "run"
    root.mkdir()
    (root / "config.yaml").write_text(to_yaml(spec_config(spec)))
    (root / ".manifest.json.abc.tmp").write_text("{")  # the half-written manifest's temp file
    assert execute_spec(spec, root)["status"] == "done"
    assert not list(root.glob(".*.tmp"))
    for extra in ("other.txt", None):
        other = tmp_path / f"other-{extra}"
        other.mkdir()
        (other / "config.yaml").write_text(to_yaml(spec_config(spec)) + ("" if extra else "# edited\n"))
        if extra:
            (other / extra).write_text("x")
        with pytest.raises(UserError, match="is not empty"):
            execute_spec(spec, other)
