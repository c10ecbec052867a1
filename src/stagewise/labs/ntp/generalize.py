"""Generalization suite: unseen sentences, and what the theory predicts for them.

The max-margin W_kq* ranks, under each query q, optimal tokens (positive score) above
non-comparable ones (score 0) above non-optimal ones (negative score) [paper, Section 6].
So an unseen sentence whose best-ranked type holds exactly one distinct token x is
*covered*: the prediction should be n(x). Everything else is reported as "not covered"
rather than hidden: ties between two non-comparable (or two optimal) tokens, a query that
never ended a training sentence (uniform attention), and unknown tokens (embedded as the
zero vector, index |V|).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import permutations

import numpy as np

from .dataset import NTPDataset

RANK = {"optimal": 2, "non_comparable": 1, "non_optimal": 0}


@dataclass(frozen=True)
class GenCase:
    """One unseen sentence. ``input`` uses index |V| for the unknown token."""

    input: tuple[int, ...]
    category: str
    expected: int | None  # None: not covered by the theory
    reason: str


def _token_type(ds: NTPDataset, query: int, token: int) -> str:
    qs = ds.structure[query]
    if token in qs.optimal:
        return "optimal"
    if token in qs.non_optimal:
        return "non_optimal"
    return "non_comparable"


def classify(ds: NTPDataset, sentence: tuple[int, ...]) -> tuple[int | None, str]:
    """(expected next token or None, reason) for a sentence under its query (last token)."""
    vocab = ds.vocab_size
    query = sentence[-1]
    if any(t >= vocab for t in sentence):
        return None, "unknown token"
    if len(sentence) == 1:
        return ds.collocation[query], "length 1: collocation"
    if query not in ds.structure:
        return None, "query never seen as a query (uniform attention)"
    types = {t: _token_type(ds, query, t) for t in set(sentence)}
    best = max(RANK[k] for k in types.values())
    top = sorted(t for t, k in types.items() if RANK[k] == best)
    if len(top) > 1:
        kind = [k for k, r in RANK.items() if r == best][0].replace("_", "-")
        return None, f"tie between {len(top)} {kind} tokens"
    return ds.collocation[top[0]], f"{types[top[0]].replace('_', '-')} token ranks highest"


def build_suite(ds: NTPDataset, max_cases: int, seed: int) -> list[GenCase]:
    """Unseen sentences by category, at most ``max_cases`` each (sampled with ``seed``).

    Categories: optimal + non-optimal, non-comparable + non-optimal,
    optimal + non-comparable (+ non-optimal), two non-comparable, unseen query,
    unknown token. Training inputs are excluded.
    """
    seen = {s.input for s in ds.samples}
    unknown = ds.vocab_size
    cats: dict[str, list[tuple[int, ...]]] = {k: [] for k in (
        "optimal + non-optimal", "non-comparable + non-optimal", "optimal + non-comparable",
        "two non-comparable", "unseen query", "unknown token")}
    for q, qs in sorted(ds.structure.items()):
        opt, non, nc = sorted(qs.optimal), sorted(qs.non_optimal - {q}), sorted(qs.non_comparable - {q})
        q_opt = q in qs.optimal
        for o in opt:
            for x in non:
                cats["optimal + non-optimal"] += [(o, x, q), (x, o, q)]
            for c in nc:
                cats["optimal + non-comparable"] += [(o, c, q), (c, o, q)]
        if not q_opt:  # the query is non-optimal, so a non-comparable token should beat it
            for c in nc:
                cats["non-comparable + non-optimal"] += [(c, q)] + [(c, x, q) for x in non]
            for c1, c2 in permutations(nc, 2):
                cats["two non-comparable"].append((c1, c2, q))
        cats["unknown token"].append((unknown, q))
    for q in range(ds.vocab_size):
        if q not in ds.structure:
            cats["unseen query"] += [(x, q) for x in range(ds.vocab_size) if x != q]
    rng = np.random.default_rng(seed)
    cases: list[GenCase] = []
    for name, sentences in cats.items():
        unique = sorted({s for s in sentences if s not in seen})
        if len(unique) > max_cases:
            pick = rng.choice(len(unique), size=max_cases, replace=False)
            unique = [unique[i] for i in sorted(pick)]
        for sentence in unique:
            expected, reason = classify(ds, sentence)
            cases.append(GenCase(sentence, name, expected, reason))
    return cases


def render(ds: NTPDataset, sentence: tuple[int, ...]) -> str:
    return " ".join(ds.tokens[t] if t < ds.vocab_size else "<unk>" for t in sentence)


def named_cases(ds: NTPDataset, sentences: list[list[str]]) -> list[GenCase]:
    """Cases for sentences given by token names (unknown names map to the unknown token)."""
    out = []
    for words in sentences:
        ids = tuple(ds.tokens.index(w) if w in ds.tokens else ds.vocab_size for w in words)
        expected, reason = classify(ds, ids)
        out.append(GenCase(ids, "named", expected, reason))
    return out
