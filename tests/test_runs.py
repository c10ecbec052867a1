"""The run store: layout, atomic files, failure records, and resume == uninterrupted."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest
import yaml

from stagewise.config import resolve
from stagewise.labs import get_lab
from stagewise.runs import Diverged, MetricSink, RunContext, execute, prepare

LAB = get_lab("ntp")
SMALL = {"seed": 5, "n_seeds": 3, "data": {"vocab_size": 6, "max_len": 5},
         "model": {"init": "random"}, "train": {"steps_stage1": 20, "steps_stage2": 40, "checkpoint_every": 7}}


def small_config(**extra):
    from stagewise.config import deep_merge

    return resolve(LAB.Config, deep_merge(SMALL, extra))


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
    assert list(frame.columns) == ["step", "seed", "metric", "value"]
    assert str(frame["step"].dtype) == "int64" and str(frame["value"].dtype) == "float64"
    steps = sorted(frame["step"].unique())
    assert steps == list(range(0, 61))
    stage = frame[frame["metric"] == "stage"].set_index(["step", "seed"])["value"]
    assert stage.loc[(20, 5)] == 1 and stage.loc[(21, 5)] == 2
    summary = json.loads(paths.summary.read_text())
    assert {"claims", "rates", "final", "wkq_star_norm_sq"} <= set(summary)
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
def test_resume_after_crash_equals_uninterrupted(tmp_path, monkeypatch, crash_at):
    config = small_config()
    reference = pd.read_parquet(run_to_end(tmp_path, "ref", config).metrics)

    original = RunContext.log

    def crashing_log(self, step, values):
        original(self, step, values)
        if step == crash_at:
            raise KeyboardInterrupt("simulated kill")

    paths = prepare(LAB, config, tmp_path / "crash")
    monkeypatch.setattr(RunContext, "log", crashing_log)
    with pytest.raises(KeyboardInterrupt):
        execute(LAB, config, paths, progress=False)
    assert json.loads(paths.manifest.read_text())["status"] == "failed"
    partial = pd.read_parquet(paths.metrics)  # what was logged so far is kept
    assert partial["step"].max() == crash_at
    monkeypatch.setattr(RunContext, "log", original)
    execute(LAB, config, paths, resume=True, progress=False)
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
        if jsonl.exists() and jsonl.stat().st_size > 0 and sum(1 for _ in open(jsonl)) > 130:
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
    import importlib

    train_mod = importlib.import_module("stagewise.labs.ntp.train")  # the package re-exports a function `train`

    original = train_mod._check_finite

    def fake_check(step, problem, values, params):
        if step == 4:
            raise Diverged(step, problem.seeds[1], "loss is not finite")
        original(step, problem, values, params)

    monkeypatch.setattr(train_mod, "_check_finite", fake_check)
    config = small_config()
    paths = prepare(LAB, config, tmp_path / "div")
    with pytest.raises(Diverged):
        execute(LAB, config, paths, progress=False)
    manifest = json.loads(paths.manifest.read_text())
    assert manifest["status"] == "diverged" and manifest["diverged"] == {"step": 4, "seed": 6, "what": "loss is not finite"}
    assert pd.read_parquet(paths.metrics)["step"].max() == 4


def test_real_divergence_with_huge_gd_step(tmp_path):
    config = small_config(train={"optimizer": "gd", "eta0": 1e308, "eta": 1e308})
    paths = prepare(LAB, config, tmp_path / "div")
    with pytest.raises(Diverged) as err:
        execute(LAB, config, paths, progress=False)
    assert json.loads(paths.manifest.read_text())["status"] == "diverged"
    assert err.value.seed in (5, 6, 7)


def test_sink_skips_torn_line_and_truncates(tmp_path):
    sink = MetricSink(tmp_path / "m.jsonl", [0, 1])
    for step in range(5):
        sink.log(step, {"loss": [step, -step]})
    sink.close()
    with open(tmp_path / "m.jsonl", "a") as handle:
        handle.write('{"step": 5, "values": {"lo')  # a kill mid-write
    assert [line["step"] for line in sink.read_lines()] == [0, 1, 2, 3, 4]
    sink.truncate_after(2)
    frame = sink.to_frame()
    assert sorted(frame["step"].unique()) == [0, 1, 2] and len(frame) == 6
