"""Sweep expansion and validation cost: `stagewise sweep SPEC --dry-run` on large sweeps.

Measures, in one process (imports warmed first), the wall time of :func:`plan` plus
:func:`fold_points` for NTP Example-1 sweeps over seeds only (one shape: the lab's checks
and size estimate run once) and over a learning-rate axis times seeds (one shape per rate),
and the time to refuse a sweep over the point cap (counted from the axes, nothing built).

    python benchmarks/bench_sweep_plan.py            # 1,000 / 10,000 / 100,000 points
    python benchmarks/bench_sweep_plan.py --max 10000
"""

from __future__ import annotations

import argparse
import time

from stagewise.errors import UserError
from stagewise.orchestrate.sweepplan import MAX_POINTS, SweepSpec, fold_points, plan

BASE = {"lab": "ntp", "preset": "example1"}


def timed(spec: dict) -> tuple[int, float]:
    start = time.perf_counter()
    points = plan(SweepSpec.model_validate(spec))
    fold_points(points, "none")
    return len(points), time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max", type=int, default=MAX_POINTS, help="largest sweep to plan")
    args = parser.parse_args()
    timed({**BASE, "axes": {"seed": [0]}})  # imports, lab registry
    print(f"{'sweep':<34} {'points':>8} {'seconds':>9} {'us/point':>9}")
    sizes = [n for n in (1_000, 10_000, 100_000) if n <= args.max]
    for n in sizes:
        for name, axes in (("seeds", {"seed": {"range": [0, n]}}),
                           ("10 rates x seeds", {"train.lr_stage2": {"logrange": [0.01, 0.1, 10]}, "seed": {"range": [0, n // 10]}})):
            count, seconds = timed({**BASE, "axes": axes})
            print(f"{name:<34} {count:>8} {seconds:>9.2f} {1e6 * seconds / count:>9.0f}")
    start = time.perf_counter()
    try:
        plan(SweepSpec.model_validate({**BASE, "axes": {"seed": {"range": [0, 1_000_000_000]}}}))
    except UserError as err:
        print(f"{'refuse 1e9 points':<34} {'':>8} {time.perf_counter() - start:>9.4f}   ({err})")


if __name__ == "__main__":
    main()
