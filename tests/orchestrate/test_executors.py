"""Executors and folding: folded seeds == unfolded, Ray and submitit-local runs == local
runs bit for bit, a submitit job interrupted by its timeout signal is requeued and resumes
to the uninterrupted result, and two sweep processes on one folder share the work."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pandas as pd
import pytest

from stagewise.errors import UserError
from stagewise.orchestrate.executors import ExecutorOptions, requeueable_job, slurm_executor
from stagewise.orchestrate.sweep import counts, run_sweep
from stagewise.orchestrate.sweepplan import SweepSpec, fold_points, plan
from stagewise.runs import read_manifest

NTP = {"lab": "ntp", "preset": "example1", "set": {"train.steps_stage1": 10, "train.steps_stage2": 20},
       "axes": {"train.lr_stage2": [0.01, 0.02], "seed": {"range": [0, 3]}}}
SMALL = {"train.lr_stage2": [0.01], "seed": {"range": [0, 3]}}  # three runs per executor test
FOLD_RTOL = 1e-12  # a batched ensemble member vs its single run: the same float ops up to summation order


def points(**over):
    return plan(SweepSpec.model_validate({**NTP, **over}))


def per_seed_metrics(out, index_entry) -> pd.DataFrame:
    frame = pd.read_parquet(out / index_entry["run_dir"] / "metrics.parquet")
    frame = frame[frame.seed.isin(index_entry["seeds"])]
    return frame.sort_values(["metric", "variant", "seed", "step"]).reset_index(drop=True)


@pytest.mark.slow  # two sweeps of 6 NTP runs, 8 run folders (in-process, figures skipped)
@pytest.mark.usefixtures("no_run_figures")  # the in-process runs' figures are not what is tested
def test_folded_seeds_equal_unfolded(tmp_path):
    pts = points()
    runs = fold_points(pts, "seeds")
    assert len(runs) == 2 and [len(r.points) for r in runs] == [3, 3]
    assert [r.seeds for r in runs][0] == ((0,), (1,), (2,))
    assert fold_points(pts, "seeds", max_seeds=2)[0].seeds == ((0,), (1,))
    folded = run_sweep(pts, tmp_path / "f", "ntp", fold="seeds", opts=ExecutorOptions(max_parallel=1))
    plain = run_sweep(pts, tmp_path / "u", "ntp", opts=ExecutorOptions(max_parallel=1))
    assert counts(folded)["done"] == counts(plain)["done"] == 6
    assert len(list((tmp_path / "f" / "runs").iterdir())) == 2 and len(list((tmp_path / "u" / "runs").iterdir())) == 6
    f_index = {p["hash"]: p for p in json.loads((tmp_path / "f" / "sweep.json").read_text())["points"]}
    u_index = {p["hash"]: p for p in json.loads((tmp_path / "u" / "sweep.json").read_text())["points"]}
    assert f_index.keys() == u_index.keys()
    for h in f_index:
        a, b = per_seed_metrics(tmp_path / "f", f_index[h]), per_seed_metrics(tmp_path / "u", u_index[h])
        assert len(a) == len(b) > 0
        np.testing.assert_allclose(a.value.to_numpy(), b.value.to_numpy(), rtol=FOLD_RTOL, atol=1e-300)
        sa = json.loads((tmp_path / "f" / f_index[h]["run_dir"] / "summary.json").read_text())["per_seed"]
        sb = json.loads((tmp_path / "u" / u_index[h]["run_dir"] / "summary.json").read_text())["per_seed"]
        seed = str(f_index[h]["seeds"][0])
        for key, value in sb[seed].items():
            if isinstance(value, float):
                assert sa[seed][key] == pytest.approx(value, rel=1e-9, abs=1e-12), key


def test_fold_keeps_non_adjacent_seeds_apart():
    pts = points(axes={"seed": [0, 1, 5, 6, 7]})
    assert [r.seeds for r in fold_points(pts, "seeds")] == [((0,), (1,)), ((5,), (6,), (7,))]


def reference(tmp_path):
    pts = points(axes=SMALL)
    results = run_sweep(pts, tmp_path / "ref", "ntp", opts=ExecutorOptions(max_parallel=1))
    assert counts(results)["done"] == len(pts)
    return pts


def assert_same_runs(a, b, pts):
    for p in pts:
        x = pd.read_parquet(a / "runs" / p.hash / "metrics.parquet")
        y = pd.read_parquet(b / "runs" / p.hash / "metrics.parquet")
        pd.testing.assert_frame_equal(x, y, check_exact=True)


@pytest.mark.slow  # starts a local Ray cluster (~20 s) besides two sweeps
@pytest.mark.usefixtures("no_run_figures")  # the runs' figures (in every process) are not what is tested
def test_ray_equals_local(tmp_path):
    pytest.importorskip("ray", reason="Ray not installed (pip install -e '.[ray]')")
    pts = reference(tmp_path)
    opts = ExecutorOptions(kind="ray", cpus_per_run=1, gpus_per_run=0)
    results = run_sweep(pts, tmp_path / "ray", "ntp", opts=opts)
    assert [r.status for r in results] == ["done"] * len(pts)
    assert_same_runs(tmp_path / "ref", tmp_path / "ray", pts)
    again = run_sweep(pts, tmp_path / "ray", "ntp", opts=opts)
    assert counts(again)["skipped"] == len(pts)


@pytest.mark.slow  # submitit-local jobs: a process per job, ~25 s
@pytest.mark.usefixtures("no_run_figures")  # the runs' figures (in every process) are not what is tested
def test_submitit_local_equals_local_and_caps_concurrency(tmp_path):
    pytest.importorskip("submitit", reason="submitit not installed (pip install -e '.[slurm]')")
    pts = reference(tmp_path)
    opts = ExecutorOptions(kind="slurm", cluster="local", max_parallel=2, time_min=5)
    results = run_sweep(pts, tmp_path / "sl", "ntp", opts=opts)
    assert [r.status for r in results] == ["done"] * len(pts)
    assert_same_runs(tmp_path / "ref", tmp_path / "sl", pts)
    starts = sorted((read_manifest(tmp_path / "sl" / "runs" / p.hash)["started"],
                     read_manifest(tmp_path / "sl" / "runs" / p.hash)["ended"]) for p in pts)
    for i, (start, _) in enumerate(starts):  # never more than max_parallel runs at once
        assert sum(s <= start < e for s, e in starts[:i]) < 2


@pytest.mark.slow  # a submitit job killed by its timeout signal and requeued: ~20 s
def test_a_submitit_timeout_requeues_and_resumes(tmp_path):
    pytest.importorskip("submitit", reason="submitit not installed (pip install -e '.[slurm]')")
    spec = {**NTP, "set": {"train.steps_stage1": 400, "train.steps_stage2": 400, "train.checkpoint_every": 50},
            "axes": {"seed": [3]}}
    (p,) = plan(SweepSpec.model_validate(spec))
    root = tmp_path / "sl"
    executor = slurm_executor(root, ExecutorOptions(kind="slurm", cluster="local", time_min=5, max_requeues=3))
    job = executor.submit(requeueable_job(), p.spec.to_json(), str(root), p.hash)
    deadline = time.time() + 120
    ckpts = root / "runs" / p.hash / "checkpoints"
    while not (ckpts.is_dir() and list(ckpts.glob("*.safetensors"))):
        assert time.time() < deadline and not job.done(), "no checkpoint appeared"
        time.sleep(0.2)
    pid = int((root / "locks" / p.hash / ".lock").read_text())
    os.kill(pid, signal.SIGUSR2)  # what SLURM sends before a timeout or preemption: submitit requeues the job
    assert job.result()[0] == "done"
    manifest = read_manifest(root / "runs" / p.hash)
    assert manifest["status"] == "done" and manifest.get("resumed"), manifest
    ref = run_sweep([p], tmp_path / "ref", "ntp", opts=ExecutorOptions(max_parallel=1))
    assert ref[0].status == "done"
    x = pd.read_parquet(root / "runs" / p.hash / "metrics.parquet")
    y = pd.read_parquet(tmp_path / "ref" / "runs" / p.hash / "metrics.parquet")
    pd.testing.assert_frame_equal(x, y, check_exact=True)


@pytest.mark.slow  # two sweep processes, each spawning its workers: ~20 s
@pytest.mark.usefixtures("no_run_figures")  # the runs' figures (in every process) are not what is tested
def test_two_sweep_processes_on_one_folder_share_the_work(tmp_path):
    spec = tmp_path / "s.yaml"
    spec.write_text(json.dumps({**NTP, "axes": {"train.lr_stage2": [0.01, 0.02], "seed": [0, 1]}, "executor": {"max_parallel": 1}}))
    cmd = [sys.executable, "-m", "stagewise.cli", "sweep", str(spec), "--out", str(tmp_path / "o"), "--no-collect"]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    runs = list((tmp_path / "o" / "runs").iterdir())
    assert len(runs) == 4 and all(read_manifest(r)["status"] == "done" for r in runs)
    assert all("resumed" not in read_manifest(r) for r in runs)  # each ran once, start to end
    done = [int(o[0].split(" done")[0].split()[-1]) for o in outs]
    assert sum(done) == 4, outs


def test_executor_option_errors(tmp_path):
    with pytest.raises(ValueError, match="fractional GPUs need kind=ray"):
        ExecutorOptions(kind="slurm", gpus_per_run=0.5)
    assert ExecutorOptions(kind="ray", gpus_per_run=0.25).gpus_per_run == 0.25
    with pytest.raises(UserError, match="repeat another point"):
        pts = points()
        run_sweep(pts + pts[:1], tmp_path, "ntp")
