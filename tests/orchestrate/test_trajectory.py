"""Trajectories (``stagewise lm trajectory``, :mod:`stagewise.orchestrate.trajectory`): a tiny
GPT-2 trained here from scratch on the CounterFact fixtures, saved at six points of its training,
evaluated in order into one lm run that ``show``, the claims and the report read as a lab run;
a SIGKILLed trajectory resumes with only the checkpoints it had not recorded and ends with the
uninterrupted run's tables; a failed checkpoint run is one line and its finished ones are kept;
Ray and submitit-local give the in-process run's tables bit for bit; bad input is one line, exit
2, nothing made.

Equality is exact everywhere (``check_exact``): every run evaluates with ``train.threads=1`` (the
threads of a matrix product decide the order of its sums), so an executor's worker, whatever its
core count, does the in-process run's floating-point operations in the same order.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest

from stagewise.labs import get_lab
from stagewise.orchestrate.executor_options import ExecutorOptions
from stagewise.orchestrate.trajectory import run_trajectory_dir, trajectory_config
from stagewise.report.claims import VERDICTS
from stagewise.runs import read_manifest
from stagewise.runs.store import Checkpoints, TableStore

from lm_fixtures import _record, counterfact_records, write_layout

N_CHECKPOINTS = 6
STEPS_PER_CHECKPOINT = 4  # AdamW steps between two saved checkpoints (the first is the initial model)
LR = 1e-2
LM = get_lab("lm")
THREADS = ["train.threads=1"]  # every evaluation single-threaded: the runs are compared bit for bit (module docstring)


@dataclass(frozen=True)
class Series:
    """One training's saved checkpoints, the data root, and the bad inputs built beside them."""

    folders: list[str]
    data: Path
    other_architecture: Path
    root: Path

    def sets(self, data: Path | None = None) -> list[str]:
        return [f"data.root={data or self.data}", *THREADS]

    def config(self):
        return trajectory_config("lm", self.folders, sets=self.sets())[1]

    def cli_args(self, out: Path) -> list[str]:
        return ["lm", "trajectory", *self.folders, "--out", str(out), *(a for s in self.sets() for a in ("--set", s))]


def _gpt2(n_layer: int, vocab: int, seed: int = 0):
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    return GPT2LMHeadModel(GPT2Config(n_layer=n_layer, n_embd=32, n_head=2, vocab_size=vocab, n_positions=64,
                                      resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0))


def train_series(root: Path) -> Series:
    """A 1-block GPT-2 (d = 32, GPT-2's BPE) trained on the answer token of every CounterFact
    fixture prompt (the lab's examples: each record's prompt and its paraphrases), saved with
    its tokenizer and a trainer_state.json after every STEPS_PER_CHECKPOINT AdamW steps."""
    import torch
    import torch.nn.functional as F

    from stagewise.lmkit.models import gpt2_bpe

    tok = gpt2_bpe()
    tok.pad_token, tok.padding_side = tok.eos_token, "left"
    prompts, answers = [], []
    for record in counterfact_records(multi_token=False):
        rewrite = record["requested_rewrite"]
        for prompt in [rewrite["prompt"].format(rewrite["subject"]), *record["paraphrase_prompts"]]:
            prompts.append(prompt)
            answers.append(tok(" " + rewrite["target_true"]["str"])["input_ids"][0])
    batch = tok(prompts, return_tensors="pt", padding=True)
    positions = batch.attention_mask.cumsum(-1).clamp(min=1) - 1  # (B, T) left padding: positions start at the first token
    target = torch.tensor(answers)  # (B,)
    model = _gpt2(1, len(tok))
    opt = torch.optim.AdamW(model.parameters(), lr=LR)
    folders = []
    for i in range(N_CHECKPOINTS):
        for _ in range(STEPS_PER_CHECKPOINT if i else 0):
            logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, position_ids=positions).logits
            loss = F.cross_entropy(logits[:, -1], target)  # (B, V) the next token after each prompt
            opt.zero_grad()
            loss.backward()
            opt.step()
        step = i * STEPS_PER_CHECKPOINT
        folder = root / "ckpts" / f"checkpoint-{step}"
        model.save_pretrained(folder)
        tok.save_pretrained(folder)
        (folder / "trainer_state.json").write_text(json.dumps({"global_step": step, "epoch": float(i)}))
        folders.append(str(folder))
    other = root / "other-architecture"
    _gpt2(2, len(tok)).save_pretrained(other)
    tok.save_pretrained(other)
    return Series(folders, write_layout(root / "data"), other, root)


@pytest.fixture(scope="module")
def series(tmp_path_factory) -> Series:
    return train_series(tmp_path_factory.mktemp("series"))


@pytest.fixture(scope="module")
def reference(series) -> Path:
    """The uninterrupted trajectory, evaluated in this process (read only)."""
    out = series.root / "reference"
    manifest = run_trajectory_dir(LM, series.config(), out, progress=False)
    assert manifest["status"] == "done", manifest
    return out


def metrics(run: Path) -> pd.DataFrame:
    return pd.read_parquet(run / "metrics.parquet")


def assert_same_records(run: Path, reference: Path) -> None:
    """metrics.parquet and every table of ``run`` equal the reference's, bit for bit and in order."""
    pd.testing.assert_frame_equal(metrics(run), metrics(reference), check_exact=True)
    names = TableStore(reference / "tables").names()
    assert names and TableStore(run / "tables").names() == names
    for name in names:
        pd.testing.assert_frame_equal(pd.read_parquet(run / "tables" / f"{name}.parquet"),
                                      pd.read_parquet(reference / "tables" / f"{name}.parquet"), check_exact=True)


def resolved(folders: list[str]) -> list[str]:
    return [str(Path(f).resolve()) for f in folders]


@pytest.fixture
def model_loads(monkeypatch):
    """Counts the models the trajectory loads in this process (one per evaluated checkpoint)."""
    from stagewise.labs.lm import track

    loaded: list[str] = []
    real = track._load

    def counting(config, name, tokenizer):
        loaded.append(name)
        return real(config, name, tokenizer)

    monkeypatch.setattr(track, "_load", counting)
    return loaded


# ------------------------------------------------------------------------- in process
def test_a_trajectory_reads_as_a_lab_run(series, reference, cli, tmp_path):
    manifest = read_manifest(reference)
    assert manifest["status"] == "done" and manifest["lab"] == "lm"
    steps = [i * STEPS_PER_CHECKPOINT for i in range(N_CHECKPOINTS)]  # trainer_state.json's global_step
    assert sorted(metrics(reference)["step"].unique()) == steps
    predictions = pd.read_parquet(reference / "tables" / "predictions.parquet")
    assert sorted(predictions["epoch"].unique()) == [float(i) for i in range(N_CHECKPOINTS)]  # trainer_state.json's epoch
    assert predictions.groupby("epoch")["category_open"].agg(lambda c: tuple(sorted(c))).nunique() > 1  # the records move

    summary = json.loads((reference / "summary.json").read_text())
    claims = {c["id"]: c for c in summary["claims"]}
    tbf, facts = claims["type_before_fact"], summary["details"]["type_before_fact"]
    assert tbf["verdict"] in VERDICTS
    # the claim is measured against the final fact count: judged from this trajectory's own records, it is
    # "not testable" exactly when the facts were still rising at the last checkpoint (issue 38), else it has a value
    sem = predictions.groupby("epoch")["category_open"].agg(lambda c: int((c == "semantic-correct").sum()))  # (E,)
    from stagewise.labs.lm.phases import facts_settled

    settling = facts_settled(sem.index.to_numpy(float), sem.to_numpy(float))
    if sem.iloc[-1] > 0 and sem.iloc[0] < 0.5 * sem.iloc[-1] and not settling.settled:
        assert tbf["verdict"] == "not testable" and "still rising" in json.dumps(tbf) and "settling" in facts
    else:
        assert "settling" not in facts
    assert summary["details"]["steps"] == steps[-1]
    assert set(summary["details"]["stage_detection"]["stages"]) >= {"type_wrong_halved", "type_correct_majority"}

    code, out, err = cli("show", str(reference))
    assert code == 0 and "type_before_fact" in out and "status=done" in out, err
    code, out, err = cli(*series.cli_args(reference))  # done: returned as it is, its lines printed, nothing run
    assert code == 0, err
    assert out.splitlines()[0].startswith(f"trajectory: {reference} (status done, {N_CHECKPOINTS} checkpoints")
    assert f"type_before_fact {claims['type_before_fact']['verdict']}" in out and "stages (step): " in out
    assert read_manifest(reference) == manifest

    from stagewise.orchestrate.reporting import write_report

    copy = shutil.copytree(reference, tmp_path / "run")  # the report is written into the folder
    result = write_report(copy)
    assert result.kind == "run" and result.html.is_file() and "type_before_fact" in result.html.read_text()


@pytest.mark.slow  # a real SIGKILL of a trajectory process, then its rerun: two fresh interpreters importing torch, ~11 s
def hub_cache_of(series: Series, root: Path, repo: str, count: int) -> Path:
    """A Hugging Face hub cache (its on-disk layout: refs/REV -> commit, snapshots/COMMIT/) holding
    the series' first ``count`` checkpoints as revisions ``stepN`` of ``repo``, without their
    trainer_state.json (as a hub repo's revisions have none)."""
    folder = root / ("models--" + repo.replace("/", "--"))
    (folder / "refs").mkdir(parents=True)
    for i, checkpoint in enumerate(series.folders[:count]):
        commit = f"{i:040x}"
        shutil.copytree(checkpoint, folder / "snapshots" / commit, ignore=shutil.ignore_patterns("trainer_state.json"))
        (folder / "refs" / f"step{i * STEPS_PER_CHECKPOINT}").write_text(commit)
    return root


def test_hub_revisions_resolve_through_the_cache_offline(series, tmp_path, monkeypatch):
    """Issue 39: ``REPO@stepN`` checkpoints read from a Hugging Face cache built here, offline:
    their snapshots are the checkpoints, their steps the revision names', and the records equal a
    trajectory over the same folders given with those steps."""
    from huggingface_hub import constants

    cache = hub_cache_of(series, tmp_path / "hf-cache", "someone/tiny-gpt2", 3)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    names = [f"someone/tiny-gpt2@step{i * STEPS_PER_CHECKPOINT}" for i in range(3)]
    _, config = trajectory_config("lm", names, sets=series.sets())
    steps = [i * STEPS_PER_CHECKPOINT for i in range(3)]
    assert config.source.steps == steps
    assert all(Path(c).is_relative_to(cache) for c in config.source.checkpoints)
    assert run_trajectory_dir(LM, config, tmp_path / "hub", progress=False)["status"] == "done"
    _, local = trajectory_config("lm", series.folders[:3], sets=series.sets(), steps=steps)
    assert run_trajectory_dir(LM, local, tmp_path / "local", progress=False)["status"] == "done"
    pd.testing.assert_frame_equal(metrics(tmp_path / "hub"), metrics(tmp_path / "local"), check_exact=True)


def test_a_killed_trajectory_evaluates_only_what_it_had_not_recorded(series, reference, tmp_path, model_loads):
    out = tmp_path / "killed"
    proc = subprocess.Popen([sys.executable, "-m", "stagewise.cli", *series.cli_args(out), "--quiet"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    try:
        while True:  # SIGKILL once three checkpoints are recorded (a resume checkpoint after each)
            latest = Checkpoints(out / "checkpoints").latest()
            if latest is not None and latest[3]["index"] >= 2:
                break
            assert proc.poll() is None, f"the trajectory ended before it was killed: {proc.communicate()[1]}"
            assert time.time() < deadline, "no third checkpoint was recorded"
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.communicate()
    recorded = Checkpoints(out / "checkpoints").latest()
    assert recorded is not None
    index = recorded[3]["index"]
    assert 2 <= index and read_manifest(out)["status"] == "running"

    manifest = run_trajectory_dir(LM, series.config(), out, progress=False)
    assert manifest["status"] == "done" and manifest.get("resumed")
    later = resolved(series.folders[index + 1:])
    assert model_loads == (later if later else resolved(series.folders[:1]))  # the last checkpoint's facts: the first's, loaded once
    assert_same_records(out, reference)


@pytest.mark.slow  # a spawned local pool (each worker imports torch) runs three checkpoint runs, then a rerun: ~10 s
def test_a_failed_checkpoint_run_is_one_line_and_its_finished_ones_are_kept(series, reference, tmp_path, cli, model_loads):
    broken = tmp_path / "broken"
    shutil.copytree(series.folders[2], broken)
    good = (broken / "model.safetensors").read_bytes()
    (broken / "model.safetensors").write_bytes(b"not safetensors")  # passes the folder checks, fails to load
    folders = [*series.folders[:2], str(broken)]
    out = tmp_path / "t"
    sets = [a for s in series.sets() for a in ("--set", s)]
    code, _, err = cli("lm", "trajectory", *folders, "--out", str(out), *sets, "--executor", "local", "--max-parallel", "1",
                       "--quiet")
    assert code == 1, err
    failed = [line for line in err.splitlines() if line.startswith("failed ")]
    assert len(failed) == 1 and failed[0].startswith(f"failed checkpoint 2 ({broken}): ") and "ckpt-0002" in failed[0], err
    assert "1 of 3 checkpoint runs did not finish" in err
    manifest = read_manifest(out)
    assert manifest["status"] == "failed" and "checkpoint 2" in manifest["error"]
    assert [read_manifest(out / "parts" / "runs" / f"ckpt-000{i}")["status"] for i in (0, 1)] == ["done", "done"]
    assert model_loads == resolved(folders)  # one worker: the local executor runs each part's own run in this process
    model_loads.clear()

    (broken / "model.safetensors").write_bytes(good)
    _, config = trajectory_config("lm", folders, sets=series.sets())
    assert run_trajectory_dir(LM, config, out, progress=False)["status"] == "done"  # no executor: the rest in process
    assert model_loads == resolved([str(broken)])  # checkpoints 0 and 1 folded from their finished runs
    steps = {str(i * STEPS_PER_CHECKPOINT) for i in range(3)}
    ref = metrics(reference)
    pd.testing.assert_frame_equal(metrics(out), ref[ref["step"].astype(str).isin(steps)].reset_index(drop=True),
                                  check_exact=True)
    ref_predictions = pd.read_parquet(reference / "tables" / "predictions.parquet")
    pd.testing.assert_frame_equal(pd.read_parquet(out / "tables" / "predictions.parquet"),
                                  ref_predictions[ref_predictions["_part"].isin(steps)].reset_index(drop=True),
                                  check_exact=True)


# ------------------------------------------------------------------------- executors
def _run_on(executor: ExecutorOptions, series: Series, reference: Path, out: Path, loads: list[str]) -> None:
    manifest = run_trajectory_dir(LM, series.config(), out, executor=executor, progress=False)
    assert manifest["status"] == "done"
    parts = sorted((out / "parts" / "runs").iterdir())
    assert [p.name for p in parts] == [f"ckpt-{i:04d}" for i in range(N_CHECKPOINTS)]
    assert all(read_manifest(p)["status"] == "done" for p in parts)
    assert loads == resolved(series.folders[:1])  # every checkpoint folded; the first loaded once for the run's facts
    assert_same_records(out, reference)


@pytest.mark.slow  # starts a local Ray cluster (~20 s) and runs six checkpoint runs (~5 s each) on 2 cores
@pytest.mark.usefixtures("no_run_figures")  # the checkpoint runs' figures (in every process) are not compared
def test_ray_trajectory_equals_in_process(series, reference, tmp_path, model_loads):
    pytest.importorskip("ray", reason="Ray not installed (pip install -e '.[ray]')")
    _run_on(ExecutorOptions(kind="ray", cpus_per_run=1, gpus_per_run=0), series, reference, tmp_path / "ray", model_loads)


@pytest.mark.slow  # submitit-local: a process per checkpoint run (~10 s each with its imports), two at a time
@pytest.mark.usefixtures("no_run_figures")  # the checkpoint runs' figures (in every process) are not compared
def test_submitit_local_trajectory_equals_in_process(series, reference, tmp_path, model_loads):
    pytest.importorskip("submitit", reason="submitit not installed (pip install -e '.[slurm]')")
    opts = ExecutorOptions(kind="slurm", cluster="local", max_parallel=2, time_min=10)
    _run_on(opts, series, reference, tmp_path / "sl", model_loads)


# ------------------------------------------------------------------------- bad input
def _no_one_token_answer(root: Path) -> Path:
    """A CounterFact file whose every answer is several GPT-2 tokens: no usable probe row."""
    folder = root / "data-multi-token" / "counterfact"
    folder.mkdir(parents=True, exist_ok=True)
    records = [_record(i, "P30", "{} is located in", subject, "ornithological taxonomy")
               for i, subject in enumerate(("Angola", "Peru"))]
    (folder / "counterfact_500.json").write_text(json.dumps(records), encoding="utf-8")
    return folder.parent


BAD = {
    "missing folder": (lambda s, t: [s.folders[0], str(t / "nope")], None, "source.checkpoints[1]=", "not found"),
    "empty folder": (lambda s, t: [s.folders[0], str(_made(t / "empty"))], None, "source.checkpoints[1]=",
                     "not a model folder (no config.json)"),
    "no weights": (lambda s, t: [s.folders[0], str(_config_only(s, t))], None, "source.checkpoints[1]=",
                   "not a model folder (no weights"),
    "other architecture": (lambda s, t: [*s.folders[:2], str(s.other_architecture)], None, "source.checkpoints[2]=",
                           "another architecture than the first checkpoint (n_layer=2 (first: 1))"),
    "no usable probe row": (lambda s, t: s.folders[:2], _no_one_token_answer, "probe sets",
                            "no example has a one-token answer"),
    "hub revision offline": (lambda s, t: [s.folders[0], "openai-community/gpt2@step100"], None,
                             "source.checkpoints[1]=openai-community/gpt2@step100:",
                             "is not in the local Hugging Face cache"),
    # round 4 (issue 39): refused before any folder is made or any checkpoint evaluated
    "out of step order": (lambda s, t: [s.folders[0], s.folders[2], s.folders[1]], None, "source.checkpoints[2]=",
                          f"global_step {STEPS_PER_CHECKPOINT} in its trainer_state.json after {2 * STEPS_PER_CHECKPOINT}: "
                          "give the checkpoints in training order"),
    "global_step 1e29": (lambda s, t: [s.folders[0], _state(s, t, '{"global_step": 100000000000000000000000000000}')],
                         None, "source.checkpoints[1]=", "global_step=100000000000000000000000000000 is not a step"),
    "epoch NaN": (lambda s, t: [s.folders[0], _state(s, t, '{"global_step": 4, "epoch": NaN}')], None,
                  "source.checkpoints[1]=", "epoch=nan is not an epoch"),
    "nested trainer_state": (lambda s, t: [s.folders[0], _state(s, t, "[" * 100_000 + "]" * 100_000)], None,
                             "source.checkpoints[1]=", "trainer_state.json is unreadable"),
    "pickle-only weights": (lambda s, t: [s.folders[0], _pickle_only(s, t)], None, "source.checkpoints[1]=",
                            "holds only pickle weights (pytorch_model.bin)"),
}


def _copy(series: Series, tmp: Path, name: str) -> Path:
    return Path(shutil.copytree(series.folders[1], tmp / name))


def _state(series: Series, tmp: Path, text: str) -> str:
    """The second checkpoint with ``text`` as its trainer_state.json."""
    folder = _copy(series, tmp, "state")
    (folder / "trainer_state.json").write_text(text)
    return str(folder)


def _pickle_only(series: Series, tmp: Path) -> str:
    """The second checkpoint with its weights as pytorch_model.bin only (never loaded: refused first)."""
    folder = _copy(series, tmp, "pickled")
    (folder / "model.safetensors").rename(folder / "pytorch_model.bin")
    return str(folder)


def _made(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _config_only(series: Series, tmp: Path) -> Path:
    folder = _made(tmp / "config-only")
    shutil.copy(Path(series.folders[0]) / "config.json", folder / "config.json")
    return folder


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_is_one_line_and_makes_nothing(series, tmp_path, cli, case):
    folders, data, start, says = BAD[case]
    args = folders(series, tmp_path)
    sets = series.sets(data(tmp_path) if data else None)
    out = tmp_path / "out" / "t"
    code, _, err = cli("lm", "trajectory", *args, "--out", str(out), *(a for s in sets for a in ("--set", s)))
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    assert lines[0].startswith(f"error: {start}") and says in lines[0], lines[0]
    assert not (tmp_path / "out").exists()


def test_another_config_in_out_is_refused(series, reference):
    from stagewise.errors import UserError

    _, config = trajectory_config("lm", series.folders[:2], sets=series.sets())
    with pytest.raises(UserError, match="holds another run"):
        run_trajectory_dir(LM, config, reference, progress=False)


@pytest.mark.parametrize("steps", [[0, 2**70], [-1, 4]])
def test_steps_outside_a_64_bit_record_step_are_one_line(series, tmp_path, cli, steps):
    out = tmp_path / "out" / "t"
    code, _, err = cli("lm", "trajectory", *series.folders[:2], "--out", str(out),
                       *(a for s in series.sets() for a in ("--set", s)), "--steps", ",".join(map(str, steps)))
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "source.steps" in lines[0] and "out of range" in lines[0], err
    assert not (tmp_path / "out").exists()


ESTIMATE_BAND = 1.25
"""The disk estimate of a trajectory lies in [the folder it writes, 1.25 x that] (as the training runs' do)."""


def test_the_disk_estimate_is_what_a_trajectory_writes_and_fits_a_small_disk(series, reference, tmp_path, monkeypatch):
    """Round 4 (issue 39): the estimate counted a training run's weights in every checkpoint, and snapshots
    (31 MiB for a 0.27 MiB folder), so a disk with 1 MiB free was refused. A trajectory writes no weights:
    its records, tables, summary, figures and a resume checkpoint of one index after each model."""
    import shutil as shutil_module
    from collections import namedtuple

    from stagewise.labs import get_lab
    from stagewise.orchestrate.runner import check_size

    lab, config = get_lab("lm"), series.config()
    written = sum(p.stat().st_size for p in reference.rglob("*") if p.is_file())
    estimate = lab.estimate(config).disk_bytes
    assert written <= estimate <= ESTIMATE_BAND * written, (estimate, written)
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil_module, "disk_usage", lambda _: usage(2**40, 2**40 - 2**20, 2**20))  # 1 MiB free
    check_size(lab, config, tmp_path / "out")  # fits: no error
    assert not (tmp_path / "out").exists()
