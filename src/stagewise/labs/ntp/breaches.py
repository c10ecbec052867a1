"""Out-of-assumption data for the reviewers' questions (``data.out_of_assumption``).

Each kind adds samples to a realizable random dataset (or, for ``non-injective``, remaps
its collocation) so that exactly one assumption of the paper fails; the validator then
reports that violation as a warning instead of an error, and the run's theory claims
become null (:mod:`.summary`). The breach draws come from their own random stream, so the
realizable part is the same dataset as without the option (a controlled comparison).

==================== ============================================ ======================
kind                 what is added, per query q (o optimal, x     assumption broken
                     non-optimal under q, from the generator)
==================== ============================================ ======================
stochastic-next      the first sentence s of q gets a second next  deterministic next
                     token n(x), x another token of s; s -> n(o)   token (U8Jg Q1)
                     counted once more, so p(n(o)) = 2/3, p(n(x)) =
                     1/3 (s drawn c times: (c+1)/(c+2), 1/(c+2))
non-injective        n(b) := n(a) for a pair (a optimal, b) of one   injective n
                     sentence (all samples with next n(b) follow),  (Assumption 1, Q2)
                     the first pair in random order that breaks
                     nothing else; a and b then co-occur
confused             (x, q) -> n(x): x is above q and below o       no confused token
                                                                    (Assumption 1, Q3)
conflicting-orders   (x, x, o, q) -> n(x): x > o and o > x, a cycle  strict partial order
                                                                    (Assumption 1, Q3)
sparse-optimal       (o, x, x, x, q) -> n(o): the optimal token     Assumption 3 (Q5)
                     once, a non-optimal one three times
==================== ============================================ ======================

The max-margin target W_kq* is then the QP over every (optimal, other) pair with each
sample's optimal *set* (tokens whose collocation is a next token of the input): it exists
for stochastic-next, non-injective, confused and sparse-optimal data, not with cycles.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ...errors import UserError
from .validate import Pair

BREACH_STREAM = 0x8B  # the breach draws' stream: default_rng((seed, BREACH_STREAM))
SPARSE_REPEATS = 3  # sparse-optimal: copies of the non-optimal token next to one optimal token


def _present(plan) -> list[int]:
    """Non-optimal tokens (query excluded) that occur in some sentence of this query."""
    return sorted({t for inp, _ in plan.sentences for t in inp[:-1]} & set(plan.extra))


def _stochastic(samples: list[Pair], n: Sequence[int], plans, rng) -> None:
    for plan in plans:
        if not plan.sentences:
            continue
        inp, o = plan.sentences[0]
        others = sorted(set(inp) - {o})  # at least the query
        x = others[int(rng.integers(len(others)))]
        samples += [(inp, n[o]), (inp, n[x])]


def _confused(samples: list[Pair], n: Sequence[int], plans, rng) -> None:
    for plan in plans:
        present = _present(plan)
        if present:
            x = present[int(rng.integers(len(present)))]
            samples.append(((x, plan.query), n[x]))


def _conflicting(samples: list[Pair], n: Sequence[int], plans, rng, max_len: int) -> None:
    if max_len < 4:
        raise UserError(f"data.out_of_assumption=conflicting-orders needs data.max_len >= 4 (got {max_len})")
    for plan in plans:
        pairs = sorted({(o, t) for inp, o in plan.sentences for t in inp[:-1] if t != o})
        if pairs:
            o, x = pairs[int(rng.integers(len(pairs)))]
            samples.append(((x, x, o, plan.query), n[x]))


def _sparse(samples: list[Pair], n: Sequence[int], plans, rng, max_len: int) -> None:
    if max_len < SPARSE_REPEATS + 2:
        raise UserError(f"data.out_of_assumption=sparse-optimal needs data.max_len >= {SPARSE_REPEATS + 2} (got {max_len})")
    for plan in plans:
        o = plan.optimal[int(rng.integers(len(plan.optimal)))]
        pool = list(plan.extra) or [plan.query]
        x = pool[int(rng.integers(len(pool)))]
        body = [o] + [x] * (SPARSE_REPEATS if x != plan.query else SPARSE_REPEATS - 1)
        samples.append((tuple(body) + (plan.query,), n[o]))


def _non_injective(samples: list[Pair], n: Sequence[int], plans, rng, valid: Callable[[list[Pair]], bool]) -> list[Pair]:
    """Remap n(b) := n(a) for the first candidate (a, b), in random order, whose data has no
    violation but the allowed ones (``valid``); every sample with next n(b) then has next n(a)."""
    candidates = sorted({(a, b) for p in plans for inp, a in p.sentences for b in inp[:-1] if b != a})
    for k in rng.permutation(len(candidates)).tolist():
        a, b = candidates[k]
        remapped = [(inp, n[a] if nxt == n[b] else nxt) for inp, nxt in samples]
        if valid(remapped):
            return remapped
    raise UserError("data.out_of_assumption=non-injective: no token pair (a, b) of this dataset can share a "
                    "collocation without breaking another assumption; try another seed or data.vocab_size")


def add_breaches(samples: list[Pair], n: Sequence[int], plans, kinds: tuple[str, ...], *, seed: int, max_len: int,
                 valid: Callable[[list[Pair]], bool]) -> list[Pair]:
    """``samples`` of a realizable dataset plus the breaches of ``kinds`` (in the order
    stochastic-next, confused, conflicting-orders, sparse-optimal, then non-injective).
    ``valid(samples)`` tells whether samples have no violation but those of ``kinds``."""
    rng = np.random.default_rng((int(seed), BREACH_STREAM))
    out = list(samples)
    if "stochastic-next" in kinds:
        _stochastic(out, n, plans, rng)
    if "confused" in kinds:
        _confused(out, n, plans, rng)
    if "conflicting-orders" in kinds:
        _conflicting(out, n, plans, rng, max_len)
    if "sparse-optimal" in kinds:
        _sparse(out, n, plans, rng, max_len)
    if "non-injective" in kinds:
        out = _non_injective(out, n, plans, rng, valid)
    return out
