"""The local executor under a stop and when its workers cannot start: a script without the
``__main__`` guard stops with one line instead of respawning workers forever; SIGINT or SIGTERM
to a sweep starts no further run, its running runs record the stop, and it exits 128 + signum."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

SWEEP = {"lab": "ntp", "preset": "example1",
         "axes": {"train.lr_stage2": [0.05, 0.1], "seed": [0, 1]}}

UNGUARDED = textwrap.dedent(f"""
    from stagewise.orchestrate.executors import ExecutorOptions
    from stagewise.orchestrate.sweep import run_sweep
    from stagewise.orchestrate.sweepplan import SweepSpec, plan

    points = plan(SweepSpec.model_validate({SWEEP!r}))
    run_sweep(points, "sweeps/eta", "ntp", opts=ExecutorOptions(kind="local", max_parallel=2))  # no __main__ guard
""")


@pytest.mark.slow  # two pools of spawned workers each import torch before dying: 20-40 s on 2 cores
def test_workers_that_die_at_start_up_stop_the_sweep_with_one_line(tmp_path):
    """Before: each spawned worker re-imported the script, died, and was replaced, forever."""
    (tmp_path / "script.py").write_text(UNGUARDED)
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "script.py"], cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert "UserError" in last and "died 2 times before any run started" in last and '__name__ == "__main__"' in last, last
    assert time.monotonic() - started < 240
    assert not list((tmp_path / "sweeps" / "eta" / "runs").glob("*/manifest.json"))  # no run was started


def _sweep_file(tmp_path: Path, steps: int) -> Path:
    spec = tmp_path / "long.yaml"
    spec.write_text(json.dumps({"lab": "ntp", "preset": "paper",
                                "set": {"train.steps_stage1": steps, "train.steps_stage2": steps, "n_seeds": 1},
                                "axes": {"seed": [0, 1, 2, 3, 4, 5]}}))
    return spec


@pytest.mark.slow  # a sweep of two spawned workers, each starting a run, then stopped: ~20-30 s each
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_stopped_sweep_starts_no_further_run_and_its_runs_record_the_stop(tmp_path, signum):
    """Before: Ctrl-C left the queued runs starting for 85 s; SIGTERM ended the sweep silently (rc -15)."""
    spec = _sweep_file(tmp_path, 20000)
    out = tmp_path / "sweep"
    proc = subprocess.Popen([sys.executable, "-m", "stagewise.cli", "sweep", "run", str(spec), "--out", str(out),
                             "--max-parallel", "2", "--no-collect"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and len(list((out / "runs").glob("*/metrics.jsonl"))) < 2:
        time.sleep(0.1)
    assert len(list((out / "runs").glob("*/metrics.jsonl"))) == 2, "the two workers did not start their runs"
    stopped_at = time.monotonic()
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=90)
    assert time.monotonic() - stopped_at < 60
    assert proc.returncode == 128 + signum, err
    name = signal.Signals(signum).name
    assert f"interrupted ({name})" in err and "continue with: stagewise sweep run" in err and "Traceback" not in err, err
    manifests = [json.loads(p.read_text()) for p in (out / "runs").glob("*/manifest.json")]
    assert len(manifests) == 2  # no queued run started after the stop
    assert all(m["status"] == "interrupted" and name in m["error"] for m in manifests), manifests
