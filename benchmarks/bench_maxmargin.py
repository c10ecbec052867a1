"""Time ``wkq_star`` on one-hot random realizable NTP data (not a test).

Usage: python benchmarks/bench_maxmargin.py [--sizes 20 100 300] [--repeats 3] [--seed 0]

Data come from a small local generator (the lab's default recipe, spec section 1): a random
collocation; per query q an optimal set of 1-3 tokens and a non-optimal set of 2-6 tokens
including q; 4 sentences per query, each one optimal token plus a random subset of the other
non-optimal tokens in random order, q last; plus the |V| length-1 samples.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter

import numpy as np

from stagewise.labs.ntp.dataset import NTPDataset, QueryStructure, Sample
from stagewise.labs.ntp.maxmargin import kq_constraints, wkq_star


def random_realizable(vocab_size: int, seed: int, sentences_per_query: int = 4) -> NTPDataset:
    """A realizable dataset over ``vocab_size`` tokens; structure computed from the samples."""
    rng = np.random.default_rng(seed)
    V = vocab_size
    collocation = rng.permutation(V)  # n(x)
    inverse = np.argsort(collocation)  # n^{-1}
    counts: Counter[Sample] = Counter()
    for q in range(V):
        others = rng.permutation(np.delete(np.arange(V), q))
        k, m = int(rng.integers(1, 4)), int(rng.integers(2, 7))
        optimal, non_optimal = others[:k], others[k : k + m - 1]  # q completes the m
        for _ in range(sentences_per_query):
            opt = int(rng.choice(optimal))
            chosen = non_optimal[rng.random(non_optimal.size) < 0.5]
            body = rng.permutation(np.append(chosen, opt)).tolist()
            counts[Sample(tuple(body + [q]), int(collocation[opt]))] += 1
    for x in range(V):
        counts[Sample((x,), int(collocation[x]))] += 1
    samples = tuple(counts)
    total = sum(counts.values())
    optimal_token = tuple(int(inverse[s.next]) for s in samples)
    relations: dict[int, set[tuple[int, int]]] = {}
    for s, opt in zip(samples, optimal_token):
        if len(s.input) >= 2:
            relations.setdefault(s.query, set()).update((opt, t) for t in set(s.input) - {opt})
    structure = {}
    for q, rel in relations.items():
        greater, lesser = {a for a, _ in rel}, {b for _, b in rel}
        structure[q] = QueryStructure(
            q, frozenset(rel), frozenset(greater - lesser), frozenset(lesser - greater),
            frozenset(set(range(V)) - greater - lesser),
        )
    return NTPDataset(
        tokens=tuple(f"t{i}" for i in range(V)),
        samples=samples,
        weights=tuple(counts[s] / total for s in samples),
        collocation=tuple(int(c) for c in collocation),
        structure=structure,
        optimal_token=optimal_token,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[20, 100, 300])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(f"{'|V|':>5} {'#samples':>9} {'#variables':>11} {'#constraints':>13} {'seconds':>9}")
    for V in args.sizes:
        ds = random_realizable(V, seed=args.seed)
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
