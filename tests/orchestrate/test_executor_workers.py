"""Every executor runs a worker of one's own (``worker=``, the pretraining study's way to put its
Trainer runs on the sweep's local pool, Ray or SLURM): each task reaches the worker with its spec,
in a process of its own where the executor makes one, and each outcome is reported, a failure too."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import executor_worker
from stagewise.orchestrate.executors import RUNNERS, ExecutorOptions
from stagewise.orchestrate.tasks import Task

TASKS = [Task(f"t{i}", json.dumps({"i": i, "fail": i == 2})) for i in range(4)]


def _run(kind: str, tmp_path, **options) -> dict[str, tuple[str, str | None]]:
    got: dict[str, tuple[str, str | None]] = {}
    RUNNERS[kind](TASKS, tmp_path, ExecutorOptions(kind=kind, **options),
                  lambda key, status, error: got.__setitem__(key, (status, error)), worker=executor_worker.echo_worker)
    return got


def _check(got, tmp_path, other_processes: bool) -> None:
    assert got == {"t0": ("done", None), "t1": ("done", None), "t2": ("failed", "asked to fail: t2"), "t3": ("done", None)}
    for i in (0, 1, 3):
        echo = json.loads((tmp_path / "echo" / f"t{i}.json").read_text())
        assert echo["spec"]["i"] == i
        assert (echo["pid"] != os.getpid()) is other_processes


def test_a_worker_of_ones_own_runs_inline_with_one_worker(tmp_path):
    _check(_run("local", tmp_path, max_parallel=1), tmp_path, other_processes=False)


@pytest.mark.slow  # a spawned pool of 2 workers (each imports stagewise: ~5 s)
def test_a_worker_of_ones_own_runs_on_the_local_pool(tmp_path):
    _check(_run("local", tmp_path, max_parallel=2), tmp_path, other_processes=True)


def _importable(monkeypatch) -> None:
    """The worker's module on the jobs' path, as a study puts its own folder there (Ray's and
    submitit's processes import the worker by name; they inherit the environment, not sys.path)."""
    here = str(Path(executor_worker.__file__).parent)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH", "")) if p))


@pytest.mark.slow  # submitit-local jobs: a process per job
def test_a_worker_of_ones_own_runs_as_submitit_jobs(tmp_path, monkeypatch):
    pytest.importorskip("submitit", reason="submitit not installed (pip install -e '.[slurm]')")
    _importable(monkeypatch)
    _check(_run("slurm", tmp_path, cluster="local", max_parallel=2, time_min=5), tmp_path, other_processes=True)


@pytest.mark.slow  # starts a local Ray cluster (~20 s)
def test_a_worker_of_ones_own_runs_as_ray_tasks(tmp_path, monkeypatch):
    pytest.importorskip("ray", reason="Ray not installed (pip install -e '.[ray]')")
    _importable(monkeypatch)
    _check(_run("ray", tmp_path, cpus_per_run=1, gpus_per_run=0), tmp_path, other_processes=True)
