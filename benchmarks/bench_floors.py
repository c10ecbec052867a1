"""Benchmark the attainable-floor computation (floors.floors_report; not a test; run by hand).

For each config: wall time of the numerical floors (semismooth Newton; on the CPU one problem at a time, floors.CPU_BATCH) from
the config alone, the Newton iterations, the certificate (max |generalised grad|, target <
floors.GRAD_TOL) and K1*, K2* (seed mean) beside the analytic fixed point. Target: the
default preset (8 seeds, d 30, L 20, N 400, test 2000) in under 10 s on this machine.
A repeat of the same call is timed too (the first pays for torch's lazy initialisation).

With --spec-table: the predicted-vs-measured table of docs/disentangled.md section 5a, the
spec's cells (||zeta||, lambda) at the default size and seeds: analytic fixed point vs the
numerical floor (seed mean and range) for K2*, K1*, m_Q*.

Usage: python benchmarks/bench_floors.py [--json benchmarks/results/floors.json] [--spec-table]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from stagewise.config import resolve
from stagewise.labs.disentangled.config import Config
from stagewise.labs.disentangled.floors import floors_report

CASES = {
    "default (8 seeds)": {},
    "zeta 2 (8 seeds)": {"data": {"zeta": 2.0}},
    "objective branches (8 seeds)": {"train": {"objective": "branches"}},
    "d 50, L 40 (4 seeds)": {"n_seeds": 4, "data": {"d": 50, "prompt_len": 40}},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default=None, help="also write the rows to this file")
    parser.add_argument("--spec-table", action="store_true", help="print the spec cells' predicted-vs-measured table only")
    args = parser.parse_args()
    if args.spec_table:
        spec_table()
        return
    rows = []
    print(f"{'case':32} {'first s':>8} {'repeat s':>8} {'iter':>9} {'max grad':>9} {'K1*':>7} {'an.K1*':>7} {'K2*':>7} {'an.K2*':>7}")
    for name, overrides in CASES.items():
        config = resolve(Config, overrides)
        start = time.perf_counter()
        report = floors_report(config)
        first = time.perf_counter() - start
        start = time.perf_counter()
        floors_report(config)
        repeat = time.perf_counter() - start
        mean = lambda key, rows=report.rows: statistics.mean(r[key] for r in rows)  # noqa: E731
        its = [r["iterations"] for r in report.rows]
        row = {"case": name, "first_s": first, "repeat_s": repeat, "iterations": f"{min(its)}-{max(its)}",
               "max_grad": max(r["grad_norm"] for r in report.rows), "K1": mean("K1"), "analytic.K1": mean("analytic.K1"),
               "K2": mean("K2"), "analytic.K2": mean("analytic.K2")}
        rows.append(row)
        print(f"{name:32} {first:8.2f} {repeat:8.2f} {row['iterations']:>9} {row['max_grad']:9.1e} {row['K1']:7.4f} "
              f"{row['analytic.K1']:7.4f} {row['K2']:7.4f} {row['analytic.K2']:7.4f}", flush=True)
    default = rows[0]["first_s"]
    print(f"default preset: {default:.2f} s (target < 10 s: {'met' if default < 10 else 'NOT met'})")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)


SPEC_CELLS = [(0.5, 0.01), (1.0, 0.01), (1.5, 0.01), (2.0, 0.01), (3.0, 0.01), (1.0, 0.001)]


def spec_table() -> None:
    print("| zeta, lambda | K2* fixed point | K2* numerical, mean (range) | K1* fixed point | K1* numerical | "
          "m_Q* fixed point | m_Q* numerical | s |\n|---|---:|---:|---:|---:|---:|---:|---:|")
    for zeta, l2 in SPEC_CELLS:
        report = floors_report(resolve(Config, {"data": {"zeta": zeta}, "train": {"l2": l2}}))
        rows = report.rows
        mean = lambda key, rows=rows: statistics.mean(r[key] for r in rows)  # noqa: E731
        k2 = [r["K2"] for r in rows]
        print(f"| {zeta:g}, {l2:g} | {mean('analytic.K2'):.3f} | {mean('K2'):.3f} ({min(k2):.3f}-{max(k2):.3f}) | "
              f"{mean('analytic.K1'):.3f} | {mean('K1'):.3f} | {mean('analytic.m_Q'):.3f} | {mean('m_Q'):.3f} | "
              f"{report.seconds:.1f} |", flush=True)


if __name__ == "__main__":
    main()
