"""Time the exact max-margin QP for W_kq* on one-hot random realizable NTP data (not a test).

Usage: python benchmarks/bench_maxmargin.py [--sizes 20 100 300] [--repeats 3] [--seed 0] [--complete]

Data come from the lab's generator (`random_dataset`, the spec's default recipe). The table
gives the QP's size (variables = entries of W_kq* that appear in a constraint) and the best
wall time of `wkq_star` (one sparse Clarabel solve + active-set polish). Target: |V| = 100
under 2 s.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from stagewise.labs.ntp.data import random_dataset
from stagewise.labs.ntp.maxmargin import kq_constraints, wkq_star


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[20, 100, 300])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--complete", action="store_true", help="generator option: cover every optimal x non-optimal pair")
    args = parser.parse_args()
    print(f"{'|V|':>5} {'#samples':>9} {'#variables':>11} {'#constraints':>13} {'seconds':>9}")
    for V in args.sizes:
        ds = random_dataset(V, seed=args.seed, complete=args.complete)
        cons = kq_constraints(ds)  # (m, 3) opt, other, query
        n_vars = np.unique(np.concatenate([cons[:, [0, 2]], cons[:, [1, 2]]]), axis=0).shape[0]
        emb = np.eye(V)
        best = np.inf
        for _ in range(args.repeats):
            start = time.perf_counter()
            wkq_star(ds, emb)
            best = min(best, time.perf_counter() - start)
        print(f"{V:>5} {len(ds.samples):>9} {n_vars:>11} {cons.shape[0]:>13} {best:>9.4f}")


if __name__ == "__main__":
    main()
