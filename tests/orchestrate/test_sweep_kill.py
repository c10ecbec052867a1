"""Issue 9's acceptance: a 24-run NTP sweep killed halfway (SIGKILL to the sweep process, or
to a worker running a point) completes when the same command runs again, with exactly 24
done runs, none run twice, and metrics identical to an uninterrupted sweep; for the local,
Ray and submitit-local executors."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from stagewise.runs import read_manifest

pytestmark = pytest.mark.slow

SWEEP = {"lab": "ntp", "preset": "example1", "set": {"train.steps_stage1": 100, "train.steps_stage2": 200,
                                                     "train.checkpoint_every": 20},
         "axes": {"train.lr_stage2": [0.01, 0.02, 0.03], "seed": {"range": [0, 8]}}}
N_RUNS = 24
KILL_AFTER = 6          # SIGKILL once this many runs are done (a quarter to a half of the sweep)
WAIT_S = 600            # a sweep (or its rerun) that takes longer than this has hung
ENV = {**os.environ, "STAGEWISE_FIGURES": "0"}  # every process of the sweep skips the runs' figures (not what is tested)


def sweep_cmd(spec: Path, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "stagewise.cli", "sweep", str(spec), "--out", str(out), "--no-collect", *extra]


def done_runs(out: Path) -> list[Path]:
    runs = out / "runs"
    return [d for d in runs.iterdir() if (d / "manifest.json").is_file()
            and read_manifest(d).get("status") == "done"] if runs.is_dir() else []


def _reference_sweep(root: Path) -> str:
    root.mkdir()
    spec = root / "s.yaml"
    spec.write_text(json.dumps(SWEEP))
    run = subprocess.run(sweep_cmd(spec, root / "out", "--max-parallel", "2"), capture_output=True, text=True,
                         timeout=WAIT_S, env=ENV)
    assert run.returncode == 0, run.stderr[-2000:]
    assert len(done_runs(root / "out")) == N_RUNS
    return ""


@pytest.fixture(scope="module")
def reference(made_once):
    """The uninterrupted sweep (local executor, 2 workers), made once for all xdist workers."""
    return made_once("sweep-kill-reference", _reference_sweep) / "out"


def kill_halfway(cmd: list[str], out: Path, victim: str) -> None:
    """Start the sweep; once KILL_AFTER runs are done, SIGKILL the sweep process (``parent``)
    or the process holding a running point's lock (``worker``)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, env=ENV)
    deadline = time.time() + WAIT_S
    try:
        while len(done_runs(out)) < KILL_AFTER:
            assert proc.poll() is None, "the sweep ended before it could be killed"
            assert time.time() < deadline, "the sweep hung"
            time.sleep(0.2)
        if victim == "parent":
            os.kill(proc.pid, signal.SIGKILL)
        else:
            pid = None
            while pid is None:
                for lock in (out / "locks").glob("*/.lock"):
                    done = (out / "runs" / lock.parent.name / "manifest.json")
                    text = lock.read_text().strip()
                    if text and done.is_file() and read_manifest(done.parent).get("status") == "running":
                        pid = int(text)
                        break
                assert time.time() < deadline and proc.poll() is None, "no running point to kill"
                time.sleep(0.05)
            os.kill(pid, signal.SIGKILL)
        proc.wait(timeout=WAIT_S)
    finally:
        if proc.poll() is None:
            proc.kill()


def check_complete(out: Path, reference: Path) -> None:
    runs = sorted(d.name for d in (out / "runs").iterdir())
    assert len(runs) == N_RUNS and runs == sorted(d.name for d in (reference / "runs").iterdir())
    for name in runs:
        assert read_manifest(out / "runs" / name)["status"] == "done"
        got = pd.read_parquet(out / "runs" / name / "metrics.parquet")
        assert not got.duplicated(["step", "seed", "variant", "metric"]).any(), f"{name}: a record was written twice"
        pd.testing.assert_frame_equal(got, pd.read_parquet(reference / "runs" / name / "metrics.parquet"), check_exact=True)


@pytest.mark.parametrize("executor,victim", [
    ("local", "parent"), ("local", "worker"), ("ray", "parent"), ("ray", "worker"), ("slurm", "parent"),
])
def test_a_killed_sweep_completes_when_run_again(tmp_path, reference, executor, victim):
    if executor == "ray":
        pytest.importorskip("ray", reason="Ray not installed (pip install -e '.[ray]')")
    if executor == "slurm":
        pytest.importorskip("submitit", reason="submitit not installed (pip install -e '.[slurm]')")
    spec = tmp_path / "s.yaml"
    spec.write_text(json.dumps(SWEEP))
    extra = ["--executor", executor, "--max-parallel", "2"]
    if executor == "slurm":
        extra += ["--set", "executor.cluster=local"]
    out = tmp_path / "out"
    kill_halfway(sweep_cmd(spec, out, *extra), out, victim)
    if victim == "parent":
        assert len(done_runs(out)) < N_RUNS
    else:  # the sweep outlives its worker: the killed run is resumed in the same command (local) or failed (ray: retried)
        resumed = [d for d in (out / "runs").iterdir() if read_manifest(d).get("resumed")]
        assert len(resumed) >= 1 or len(done_runs(out)) < N_RUNS
    again = subprocess.run(sweep_cmd(spec, out, *extra), capture_output=True, text=True, timeout=WAIT_S, env=ENV)
    assert again.returncode == 0, (again.stdout[-1000:], again.stderr[-2000:])
    assert f"({N_RUNS} points" in again.stdout
    check_complete(out, reference)
