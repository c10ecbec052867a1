"""Sweep benchmarks (issue 9), by hand: ``python benchmarks/bench_sweep.py [--quick] [--only NAME]``.

1. overhead: what each executor adds to a trivial NTP run (2 + 2 steps): ``wall x workers -
   sum of the runs' own durations`` (read from their manifests, started .. ended), for two
   sweep sizes; the slope is the per-run overhead (target: local < 0.5 s), the intercept
   the fixed start-up (spawning and importing the workers, starting Ray).
2. speedup: 24 NTP runs (the kill-test sweep) with the local executor, 2 workers vs 1.
   Target >= 1.7x on 2 cores.
3. folding: a 64-point disentangled grid (8 noise values x 8 seeds), one process per point
   vs the seeds folded into 8 batched runs of 8 seeds.

Prints one table per benchmark; nothing is asserted (benchmarks are scripts, not tests).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

from stagewise.orchestrate.executors import ExecutorOptions
from stagewise.orchestrate.sweep import counts, run_sweep
from stagewise.orchestrate.sweepplan import SweepSpec, plan
from stagewise.runs import read_manifest

TRIVIAL = {"lab": "ntp", "preset": "example1", "set": {"train.steps_stage1": 2, "train.steps_stage2": 2}}
NTP24 = {"lab": "ntp", "preset": "example1", "set": {"train.steps_stage1": 100, "train.steps_stage2": 200,
                                                     "train.checkpoint_every": 20},
         "axes": {"train.lr_stage2": [0.01, 0.02, 0.03], "seed": {"range": [0, 8]}}}
GRID64 = {"lab": "disentangled", "set": {"n_seeds": 1, "experiment.control": False, "data.d": 20,
                                         "train.steps": 400, "train.t1": 200},
          "axes": {"train.noise": [0.0, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35], "seed": {"range": [0, 8]}}}


def timed_sweep(spec: dict, opts: ExecutorOptions, fold: str = "none") -> tuple[float, float, int, int]:
    """(wall s, sum of run durations s, points, runs) of one fresh sweep."""
    points = plan(SweepSpec.model_validate(spec))
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        results = run_sweep(points, Path(tmp), spec["lab"], opts=opts, fold=fold)
        wall = time.perf_counter() - start
        bad = {k: v for k, v in counts(results).items() if k != "done" and v}
        if bad:
            sys.exit(f"benchmark sweep did not complete: {bad}")
        inside, runs = 0.0, 0
        for run in (Path(tmp) / "runs").iterdir():
            m = read_manifest(run)
            inside += (datetime.fromisoformat(m["ended"]) - datetime.fromisoformat(m["started"])).total_seconds()
            runs += 1
    return wall, inside, len(points), runs


def overhead(quick: bool) -> None:
    """Overhead O(n) = wall x workers - time inside the runs, for n1 and n2 runs: the slope
    is the per-run overhead, the intercept the executor's fixed start-up (pool spawn and
    imports, a Ray cluster, ...)."""
    n1, n2 = (4, 12) if quick else (6, 24)
    cases = [("local", ExecutorOptions(kind="local", max_parallel=2), 2)]
    try:
        import ray  # noqa: F401
        cases.append(("ray (local cluster)", ExecutorOptions(kind="ray", max_parallel=2), 2))
    except ImportError:
        print("ray: not installed, skipped")
    try:
        import submitit  # noqa: F401
        cases.append(("submitit-local", ExecutorOptions(kind="slurm", cluster="local", max_parallel=2), 2))
    except ImportError:
        print("submitit: not installed, skipped")
    print(f"\n1. executor overhead, trivial NTP runs (2 + 2 steps), 2 at a time; sweeps of {n1} and {n2} runs")
    print(f"{'executor':22s} {'wall s':>14s} {'in runs s':>14s} {'per run s':>10s} {'fixed s':>8s}")
    for name, opts, workers in cases:
        rows = [timed_sweep({**TRIVIAL, "axes": {"seed": {"range": [0, n]}}}, opts) for n in (n1, n2)]
        over = [wall * workers - inside for wall, inside, _, _ in rows]
        per_run = (over[1] - over[0]) / (n2 - n1)
        fixed = over[0] - n1 * per_run
        print(f"{name:22s} {rows[0][0]:6.1f} /{rows[1][0]:6.1f} {rows[0][1]:6.1f} /{rows[1][1]:6.1f} "
              f"{per_run:10.3f} {fixed:8.1f}")


def speedup(quick: bool) -> None:
    spec = NTP24 if not quick else {**NTP24, "axes": {"train.lr_stage2": [0.01], "seed": {"range": [0, 8]}}}
    walls = {}
    print(f"\n2. local executor, {len(plan(SweepSpec.model_validate(spec)))} NTP runs: 1 vs 2 workers "
          f"({os.cpu_count()} cores)")
    for workers in (1, 2):
        walls[workers] = timed_sweep(spec, ExecutorOptions(kind="local", max_parallel=workers))[0]
        print(f"  {workers} worker(s): {walls[workers]:.1f} s")
    print(f"  speedup: {walls[1] / walls[2]:.2f}x")


def folding(quick: bool) -> None:
    spec = GRID64 if not quick else {**GRID64, "axes": {"train.noise": [0.0, 0.1], "seed": {"range": [0, 8]}}}
    n = len(plan(SweepSpec.model_validate(spec)))
    print(f"\n3. disentangled grid of {n} points, local executor with 2 workers")
    print(f"{'fold':8s} {'runs':>5s} {'wall s':>8s}")
    walls = {}
    for fold in ("none", "seeds"):
        wall, _, _, runs = timed_sweep(spec, ExecutorOptions(kind="local", max_parallel=2), fold)
        walls[fold] = wall
        print(f"{fold:8s} {runs:5d} {wall:8.1f}")
    print(f"  gain of folding: {walls['none'] / walls['seeds']:.1f}x")


BENCHES = {"overhead": overhead, "speedup": speedup, "folding": folding}

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sweeps (a minute or two)")
    parser.add_argument("--only", choices=sorted(BENCHES), action="append", help="run only these benchmarks")
    args = parser.parse_args()
    for name in args.only or BENCHES:
        BENCHES[name](args.quick)
