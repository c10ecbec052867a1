"""Benchmark the attainable-floor computation (floor_tables.floors_report; not a test; run by hand).

For each config: wall time of the numerical floors (semismooth Newton; on the CPU one problem at a time, floors.CPU_BATCH) from
the config alone, the Newton iterations, the certificate (max |generalised grad|, target <
floors.GRAD_TOL) and K1*, K2* (seed mean) beside the analytic fixed point. Target: the
default preset (8 seeds, d 30, L 20, N 400, test 2000) in under 10 s on this machine.
A repeat of the same call is timed too (the first pays for torch's lazy initialisation).

With --spec-table: the predicted-vs-measured table of docs/disentangled.md section 5a, the
spec's cells (||zeta||, lambda) at the default size and seeds: analytic fixed point vs the
numerical floor (seed mean and range) for K2*, K1*, m_Q*.

With --starts: the floors as the lowest objective found over the declared starts
(experiment.floor_starts; floor_starts.py) on the default preset and two configs not used while
developing them: ||zeta|| = 1.5 with lambda = 0.003 (Q learned far below log 2: many gates
active, margins 5-10x the default's, where a local optimum has the most room) and d 50, L 40 (a
larger problem: 5000 weights, 39 context tokens). Per seed: J, K1*, K2* of each start, the
chosen start, the spread over the converged starts (J max - min, K2* max - min) and the seconds
of its solves; whether the verdict inputs (the floors row's K1, K2 and K2.min) equal the lowest
recomputed here from the per-start rows; and the preset's floors time with the init start
alone (the floors before the starts) vs all starts.

With --starts --starts-json PATH the per-seed lowest J, K1*, K2* and each case's seconds go to PATH;
--compare BEFORE.json prints them beside a BEFORE file written the same way by an earlier source tree
(PYTHONPATH=<old checkout>/src python benchmarks/bench_floors.py --starts --starts-json before.json):
seconds before/after and the largest |J_after - J_before| / |J_before| over the seeds of each case.

Usage: python benchmarks/bench_floors.py [--json benchmarks/results/floors.json] [--spec-table]
       [--starts [--starts-json PATH] [--compare BEFORE.json]]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from stagewise.config import resolve
from stagewise.labs.disentangled.config import Config
from stagewise.labs.disentangled.floor_tables import floors_report

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
    parser.add_argument("--starts", action="store_true", help="print the floors over the declared starts only")
    parser.add_argument("--starts-json", default=None, help="with --starts: also write the per-seed floors and seconds here")
    parser.add_argument("--compare", default=None, help="with --starts: a --starts-json file of an earlier tree to compare")
    args = parser.parse_args()
    if args.spec_table:
        spec_table()
        return
    if args.starts:
        results = starts_table()
        if args.starts_json:
            with open(args.starts_json, "w") as fh:
                json.dump(results, fh, indent=1)
        if args.compare:
            with open(args.compare) as fh:
                compare(json.load(fh), results)
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



STARTS_CASES = {  # not used while developing the starts (those were d 6-10, N 40-60 and the default at 2 seeds)
    "default (8 seeds)": {},
    "zeta 1.5, lambda 0.003 (8 seeds)": {"data": {"zeta": 1.5}, "train": {"l2": 0.003}},
    "d 50, L 40 (8 seeds)": {"data": {"d": 50, "prompt_len": 40}},
}


def timed_solves(seconds: dict[tuple[int, str], float]):
    """floors.solve wrapped to add each call's seconds to ``seconds[(seed, start)]`` (one problem
    per call on the CPU, floor_limits.CPU_BATCH = 1)."""
    from stagewise.labs.disentangled import floors

    real = floors.solve

    def solve(config, members, *args, starts=None, **kwargs):
        start = time.perf_counter()
        out = real(config, members, *args, starts=starts, **kwargs)
        for m, name in zip(members, starts or ["init"] * len(members)):
            seconds[(m.seed, name)] = seconds.get((m.seed, name), 0.0) + (time.perf_counter() - start) / len(members)
        return out

    return real, solve


def compare(before: dict, after: dict) -> None:
    """Seconds and lowest objectives of two --starts-json results, case by case."""
    print("\n| case | before s | after s | speed-up | max rel. J difference over seeds | K2* max abs. difference |\n"
          "|---|---:|---:|---:|---:|---:|")
    for case, now in after.items():
        old = before.get(case)
        if old is None:
            continue
        rel = max(abs(a["J"] - b["J"]) / abs(b["J"]) for a, b in zip(now["seeds"], old["seeds"]))
        k2 = max(abs(a["K2"] - b["K2"]) for a, b in zip(now["seeds"], old["seeds"]))
        print(f"| {case} | {old['seconds']:.1f} | {now['seconds']:.1f} | {old['seconds'] / now['seconds']:.2f}x | {rel:.1e} | "
              f"{k2:.1e} |")


def starts_table() -> dict:
    from stagewise.labs.disentangled import floor_tables, floors
    from stagewise.labs.disentangled.floor_starts import TIE_REL
    from stagewise.labs.disentangled.train import members_from_config

    results: dict = {}
    floor_tables.floor_tables(resolve(Config, {"n_seeds": 1}), members_from_config(resolve(Config, {"n_seeds": 1})))  # warm-up
    for name, overrides in STARTS_CASES.items():
        config = resolve(Config, overrides)
        members = members_from_config(config)
        seconds: dict[tuple[int, str], float] = {}
        real, floors.solve = timed_solves(seconds)
        try:
            begin = time.perf_counter()
            tables = floor_tables.floor_tables(config, members)
            total = time.perf_counter() - begin
        finally:
            floors.solve = real
        starts = list(config.experiment.floor_starts)
        results[name] = {"seconds": total, "seeds": [{k: r[k] for k in ("seed", "J", "K1", "K2", "start")} for r in tables.rows]}
        print(f"\n{name}: {len(members)} seeds x {len(starts)} starts in {total:.1f} s", flush=True)
        print(f"{'seed':>4} " + " ".join(f"{s + ' J / K1* / K2*':>30}" for s in starts)
              + f" {'chosen':>8} {'J spread':>9} {'K2 spread':>9} {'s':>6} {'verdict inputs = lowest':>23}")
        for i, row in enumerate(tables.rows):
            mine = tables.start_rows[i * len(starts):(i + 1) * len(starts)]
            pool = [r for r in mine if r["converged"]] or mine
            lowest = min(pool, key=lambda r: r["J"])
            same = (abs(row["J"] - lowest["J"]) <= TIE_REL * abs(lowest["J"]) and row["K2.min"] == min(r["K2"] for r in pool)
                    and (row["K1"], row["K2"]) == next((r["K1"], r["K2"]) for r in mine if r["start"] == row["start"]))
            cells = " ".join(f"{r['J']:10.6f} / {r['K1']:.4f} / {r['K2']:.4f}{'' if r['converged'] else '!'}" for r in mine)
            took = sum(seconds.get((row["seed"], s), 0.0) for s in starts)
            print(f"{row['seed']:>4} {cells} {row['start']:>8} {row['J.spread']:9.2e} {row['K2.max'] - row['K2.min']:9.2e} "
                  f"{took:6.1f} {'yes' if same else 'NO':>23}", flush=True)
        if name.startswith("default"):
            begin = time.perf_counter()
            floor_tables.floor_tables(config.model_copy(update={"experiment": config.experiment.model_copy(
                update={"floor_starts": ["init"]})}), members)
            print(f"default preset floors: init start alone (before) {time.perf_counter() - begin:.1f} s vs "
                  f"{len(starts)} starts {total:.1f} s", flush=True)
    print("! = that start did not converge (max |generalised grad| >= GRAD_TOL; left out of the choice and the spreads)")
    print("s: seconds of a seed's solves (wall time while solving; two batches run side by side on 2 cores)")
    return results


if __name__ == "__main__":
    main()
