"""N-gram reference LMs (nltk.lm) on the tokens a study's LM sees, scored on minimal pairs by its rule.

Each token-id sequence ``t_1..t_m`` (the corpus through the LM's tokenizer) is read as the LM
reads a text, ``s = [p, t_1..t_m]`` after the prefix token ``p`` (no second ``p`` where
``t_1 == p``: :func:`~stagewise.lmkit.scoring.with_prefix`), padded with ``p`` on the left so
the first token is predicted from ``(p, .., p)``. An order-``n`` reference fitted on such
sequences gives::

    log P(s) = sum_{i=1..m} ln P_n(s_i | s_{i-n+1} .. s_{i-1})        (s_j = p for j < 0)

over the vocabulary ``V`` = corpus tokens, ``p`` and ``<UNK>`` (any unseen token). The
interpolated smoothings (nltk's ``P(w | h) = alpha(w, h) + gamma(h) P(w | h')``) end here in
the uniform ``1/|V|`` (Chen & Goodman 1998; nltk's unigram gives ``<UNK>`` zero), so every
log-probability is finite and ``sum_{w in V} P(w | h) = 1``. :data:`SMOOTHINGS`: ``kneser_ney``
(default: the best held-out perplexity, docs/lmkit.md), ``witten_bell``,
``absolute_discounting``, ``lidstone``, ``laplace``. Each distinct n-gram is scored once, nltk's
scores memoized per (context, token) within a call, Kneser-Ney's continuation counts indexed
once (nltk scans every context of the order above per call, ~15 ms each). A total adds its
terms in ascending order, so equal multisets of terms tie exactly. A pair is right when
``log P(delimiter + good) >= log P(delimiter + bad)``, tokenized as
:func:`~stagewise.lmkit.blimp.score_blimp` does.

Example::

    corpus = encode_texts(tok, lines)                                  # list of token-id lists
    table = paradigm_accuracy(read_pairs(Path("zorro"), limit=200), tok, corpus)
    best(table)                                 # per paradigm: field, accuracy, ties, order
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import pandas as pd
from nltk.lm import Lidstone
from nltk.lm.models import InterpolatedLanguageModel
from nltk.lm.smoothing import AbsoluteDiscounting, KneserNey, WittenBell

from stagewise.errors import UserError, short_repr
from stagewise.lmkit.blimp import LM_EVAL_DELIMITER
from stagewise.lmkit.scoring import encode_texts, prefix_token_id, with_prefix

SMOOTHINGS = ("kneser_ney", "witten_bell", "absolute_discounting", "lidstone", "laplace")
DEFAULT_SMOOTHING = "kneser_ney"
"""Best held-out perplexity at orders 2-4 on TinyStories with a 4096-id BPE (benchmarks/bench_ngrams.py)."""
MIN_ORDER, MAX_ORDER = 1, 6
KN_DISCOUNT = 0.75
"""Kneser-Ney's discount: the usual 0.75 (held-out perplexity at order 4: 107 with nltk's default 0.1, 43 with 0.5, 37 with 0.75)."""
ABSOLUTE_DISCOUNT = 0.75
LIDSTONE_GAMMA = 0.01
"""Lidstone's added count (the best of 1, 0.1, 0.01, 0.001 on held-out TinyStories at orders 2-4)."""
ORDERS = (1, 2, 3, 4)
ACCURACY_COLUMNS = ("order", "paradigm", "field", "accuracy", "pairs", "ties", "accuracy_ties_right")
"""paradigm_accuracy's columns. A reference that cannot tell a pair's sentences apart (equal totals:
a unigram model ties every pair whose sentences are the same tokens reordered) has not solved it:
``accuracy`` counts a tie as half a pair (a coin breaks it), ``accuracy_ties_right`` as right
(lm-eval's rule for a language model, where ties do not happen in practice)."""


@dataclass(frozen=True, eq=False)
class NgramReference:
    """One fitted n-gram reference (:func:`fit_ngram`).

    Attributes:
        order: n (the context is the previous ``n - 1`` tokens).
        smoothing: one of :data:`SMOOTHINGS`.
        start: the prefix token id every sequence is read after (module doc).
        model: the fitted nltk.lm model; its symbols are token ids as strings, ``<UNK>`` for unseen ones.
        n_tokens: training tokens predicted (the start excluded).
        vocab_size: ``|V|``: distinct corpus tokens, the start and ``<UNK>``.
    """

    order: int
    smoothing: str
    start: int
    model: Any
    n_tokens: int
    vocab_size: int


# ------------------------------------------------------------------------------ nltk pieces
class _Memo:
    """nltk's ``unmasked_score``, memoized per (word, context) while :func:`sequence_logprob`
    runs (``_memo`` a dict then, else None); the interpolation's recursion goes through it, so
    the lower orders shared by many n-grams are scored once."""

    _memo: dict[tuple[str, tuple[str, ...] | None], float] | None = None

    def unmasked_score(self, word: str, context: tuple[str, ...] | None = None) -> float:
        if self._memo is None:
            return super().unmasked_score(word, context)  # type: ignore[misc]
        key = (word, context)
        value = self._memo.get(key)
        if value is None:
            value = self._memo[key] = super().unmasked_score(word, context)  # type: ignore[misc]
        return value


class _Interpolated(_Memo, InterpolatedLanguageModel):
    """nltk's interpolation (``alpha + gamma P(w | h')``) over one of the estimators below."""


class _Lidstone(_Memo, Lidstone):
    """``(c(h w) + gamma) / (c(h) + gamma |V|)``: nltk's Laplace is gamma = 1."""


class _WittenBell(WittenBell):
    """Witten-Bell down to the uniform: ``P(w) = (c(w) + T/|V|) / (N + T)``, T = seen types."""

    def unigram_score(self, word: str) -> float:
        unigrams = self.counts.unigrams
        return (unigrams[word] + len(unigrams) / len(self.vocab)) / (unigrams.N() + len(unigrams))


class _AbsoluteDiscounting(AbsoluteDiscounting):
    """Absolute discounting down to the uniform: ``P(w) = (max(c(w) - d, 0) + d T/|V|) / N``."""

    def unigram_score(self, word: str) -> float:
        unigrams = self.counts.unigrams
        return (max(unigrams[word] - self.discount, 0.0) + self.discount * len(unigrams) / len(self.vocab)) / unigrams.N()


class _KneserNey(KneserNey):
    """nltk's Kneser-Ney with its continuation counts indexed once (nltk scans every context of
    the order above per call) and its unigram interpolated with the uniform (raw counts at order 1)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._index: dict[tuple[str, ...], tuple[dict[str, int], int]] | None = None

    def index(self) -> dict[tuple[str, ...], tuple[dict[str, int], int]]:
        """``{h: ({w: N1+(. h w)}, N1+(. h .))}`` for every context ``h`` below the highest
        order (built once, after the counts)."""
        if self._index is None:
            index: dict[tuple[str, ...], tuple[dict[str, int], int]] = {}
            for k in range(2, self._order + 1):  # contexts of length k - 1, indexed by their suffix of length k - 2
                for ctx, followers in self.counts[k].items():
                    per_word, total = index.get(ctx[1:], ({}, 0))
                    seen = [w for w, c in followers.items() if c > 0]
                    for w in seen:
                        per_word[w] = per_word.get(w, 0) + 1
                    index[ctx[1:]] = per_word, total + len(seen)
            self._index = index
        return self._index

    def _continuation_counts(self, word: str, context: tuple[str, ...] = ()) -> tuple[int, int]:
        per_word, total = self.index().get(tuple(context), ({}, 0))
        return per_word.get(word, 0), total

    def unigram_score(self, word: str) -> float:
        if self._order == 1:  # the highest order takes raw counts
            unigrams = self.counts.unigrams
            count, total, types = unigrams[word], unigrams.N(), len(unigrams)
        else:
            count, total = self._continuation_counts(word)
            types = len(self.index()[()][0])
        return (max(count - self.discount, 0.0) + self.discount * types / len(self.vocab)) / total


def _new_model(smoothing: str, order: int) -> Any:
    if smoothing in ("lidstone", "laplace"):
        return _Lidstone(LIDSTONE_GAMMA if smoothing == "lidstone" else 1, order)
    estimator, params = {"witten_bell": (_WittenBell, {}),
                         "kneser_ney": (_KneserNey, {"discount": KN_DISCOUNT, "order": order}),
                         "absolute_discounting": (_AbsoluteDiscounting, {"discount": ABSOLUTE_DISCOUNT})}[smoothing]
    return _Interpolated(estimator, order, params=params)


# ------------------------------------------------------------------------------ windows
def _windows(sequences: Sequence[Sequence[int]], order: int, start: int) -> tuple[np.ndarray, np.ndarray]:
    """``(windows, owner)``: (M, order) int64 ``[context.., token]`` of every predicted token
    (module doc's padding) and (M,) the index of its sequence."""
    flat, lengths = with_prefix(sequences, start)  # (sum L,), (N,) each >= 1
    pad = max(order - 2, 0)
    starts = np.cumsum(lengths) - lengths  # (N,)
    padded = np.insert(flat, np.repeat(starts, pad), start)  # (sum L + N pad,)
    padded_starts = starts + pad * np.arange(lengths.size)  # (N,)
    owner = np.repeat(np.arange(lengths.size), lengths - 1)  # (M,)
    offset = np.arange(owner.size) - np.repeat(np.cumsum(lengths - 1) - (lengths - 1), lengths - 1)  # (M,) 0-based
    position = padded_starts[owner] + pad + 1 + offset  # (M,) index of the token in padded
    return padded[position[:, None] + np.arange(1 - order, 1)[None, :]], owner


def _check(order: object, smoothing: object) -> None:
    if not isinstance(order, (int, np.integer)) or isinstance(order, bool) or not MIN_ORDER <= order <= MAX_ORDER:
        raise UserError(f"n-gram order={short_repr(order)} is not allowed: give an integer from {MIN_ORDER} to {MAX_ORDER}")
    if smoothing not in SMOOTHINGS:
        raise UserError(f"n-gram smoothing={short_repr(smoothing)} is not allowed: give one of {', '.join(SMOOTHINGS)}")


# ------------------------------------------------------------------------------ fit and score
def fit_ngram(sequences: Sequence[Sequence[int]], order: int, *, start: int,
              smoothing: str = DEFAULT_SMOOTHING) -> NgramReference:
    """An n-gram reference fitted on token-id sequences, each read after ``start`` (module doc).

    Args:
        sequences: N sequences of token ids (the corpus through the LM's tokenizer, no special tokens).
        order: n, from :data:`MIN_ORDER` to :data:`MAX_ORDER`.
        start: the prefix token id (:func:`~stagewise.lmkit.scoring.prefix_token_id` of the tokenizer).
        smoothing: one of :data:`SMOOTHINGS`.

    Example::

        ref = fit_ngram([[5, 6, 7], [5, 7]], 2, start=0)   # ref.n_tokens 5, ref.vocab_size 5 (3 tokens, start, <UNK>)
    """
    _check(order, smoothing)
    if not isinstance(start, (int, np.integer)) or isinstance(start, bool) or start < 0:
        raise UserError(f"n-gram start={short_repr(start)} is not allowed: give a token id (an integer >= 0)")
    windows, _ = _windows(sequences, int(order), int(start))  # (M, order)
    if not windows.size:
        raise UserError(f"n-gram corpus has no tokens ({len(sequences)} sequences): give token-id sequences of the corpus")
    ids, inverse = np.unique(windows, return_inverse=True)
    symbols = np.array([str(i) for i in ids.tolist()], dtype=object)[inverse.reshape(windows.shape)]  # (M, order)
    rows = symbols.tolist()
    grams = [[tuple(row[order - k:]) for row in rows for k in range(1, order + 1)]]  # every n-gram ending at a token
    model = _new_model(smoothing, int(order))
    # nltk's LanguageModel.fit without its vocabulary lookup: every symbol is in the vocabulary
    # (cutoff 1), so the lookup (3/4 of fit's time) maps each to itself
    model.vocab.update([*symbols[:, -1].tolist(), str(start)])
    try:
        model.counts.update(grams)
    except ValueError as exc:  # nltk's bound on distinct n-grams
        raise UserError(f"n-gram corpus too large for nltk at order {order}: {exc}") from None
    estimator = getattr(model, "estimator", None)
    if isinstance(estimator, _KneserNey):
        estimator.index()  # built here, so scoring times only scoring
    return NgramReference(int(order), smoothing, int(start), model, int(windows.shape[0]), len(model.vocab))


def sequence_logprob(ref: NgramReference, sequences: Sequence[Sequence[int]]) -> np.ndarray:
    """(N,) float64 ``sum_i ln P(s_i | context)`` of each of N token-id sequences read after
    ``ref.start`` (module doc's formula; an empty sequence scores 0; unseen tokens score as ``<UNK>``).

    Example::

        sequence_logprob(fit_ngram([[5, 6, 7]], 2, start=0), [[5, 6, 7], [7, 6, 5]])   # (2,), the first higher
    """
    windows, owner = _windows(sequences, ref.order, ref.start)  # (M, order), (M,)
    model = ref.model
    ids, inverse = np.unique(windows, return_inverse=True)
    names = [model.vocab.lookup(str(i)) for i in ids.tolist()]  # nltk's masking: unseen -> <UNK>
    codes = {name: k for k, name in enumerate(dict.fromkeys(names))}
    coded = np.array([codes[n] for n in names], dtype=np.int64)[inverse.reshape(windows.shape)]  # (M, order)
    unique, which = np.unique(coded, axis=0, return_inverse=True)  # each distinct n-gram scored once
    symbol = list(codes)
    model._memo = {}
    try:
        probs = np.array([model.unmasked_score(symbol[row[-1]], tuple(symbol[c] for c in row[:-1]) or None)
                          for row in unique.tolist()], dtype=np.float64)  # (U,)
    finally:
        model._memo = None
    if probs.size and not (np.all(probs > 0) and np.all(np.isfinite(probs))):
        raise RuntimeError(f"n-gram {ref.smoothing} order {ref.order}: a zero or non-finite probability (a bug)")
    token_lp = np.log(probs)[which.reshape(-1)] if probs.size else np.zeros(0)  # (M,)
    ordered = np.lexsort((token_lp, owner))  # (M,) each sequence's terms in ascending order: equal multisets tie exactly
    return np.bincount(owner[ordered], weights=token_lp[ordered], minlength=len(sequences)).astype(np.float64)


def _pair_texts(pairs: pd.DataFrame, delimiter: str) -> list[str]:
    missing = [c for c in ("paradigm", "field", "sentence_good", "sentence_bad") if c not in pairs.columns]
    if missing:
        raise UserError(f"minimal pairs lack column {missing[0]!r} (read them with stagewise.lmkit.probesets.read_pairs)")
    return [delimiter + s for column in ("sentence_good", "sentence_bad") for s in pairs[column].tolist()]


def _scored(ref: NgramReference, token_ids: list[list[int]], pairs: pd.DataFrame) -> pd.DataFrame:
    ll = sequence_logprob(ref, token_ids)  # (2N,) good then bad
    out = pairs.copy()
    out["ll_good"], out["ll_bad"] = ll[:len(pairs)], ll[len(pairs):]
    out["correct"] = out["ll_good"] >= out["ll_bad"]  # a tie counts as right (lm_eval's rule)
    return out


def score_pairs(ref: NgramReference, tokenizer: Any, pairs: pd.DataFrame, *,
                delimiter: str = LM_EVAL_DELIMITER) -> pd.DataFrame:
    """``pairs`` plus ll_good, ll_bad (float64) and correct (good >= bad, ties right), each
    sentence tokenized as :func:`~stagewise.lmkit.blimp.score_blimp` does (``delimiter +
    sentence``, :func:`~stagewise.lmkit.scoring.encode_texts`) and read after ``ref.start``.

    Example::

        scored = score_pairs(fit_ngram(corpus, 3, start=prefix_token_id(tok)), tok, pairs)
    """
    return _scored(ref, encode_texts(tokenizer, _pair_texts(pairs, delimiter)), pairs)


def paradigm_accuracy(pairs: pd.DataFrame, tokenizer: Any, corpus_sequences: Sequence[Sequence[int]],
                      orders: Sequence[int] = ORDERS, *, smoothing: str = DEFAULT_SMOOTHING,
                      delimiter: str = LM_EVAL_DELIMITER) -> pd.DataFrame:
    """One row per (order, paradigm): :data:`ACCURACY_COLUMNS` (accuracy: share of pairs right,
    a tie counted half; pairs: their number; ties: pairs with equal totals; accuracy_ties_right:
    ties counted right), each order fitted on
    ``corpus_sequences`` after the tokenizer's prefix token and scored by :func:`score_pairs`'s rule.

    Example::

        table = paradigm_accuracy(pairs, tok, encode_texts(tok, lines), orders=(1, 2, 3))
    """
    if not len(orders):
        raise UserError(f"n-gram orders={short_repr(orders)}: give at least one order from {MIN_ORDER} to {MAX_ORDER}")
    for order in orders:
        _check(order, smoothing)
    token_ids = encode_texts(tokenizer, _pair_texts(pairs, delimiter))
    start = prefix_token_id(tokenizer)
    frames = []
    for order in dict.fromkeys(orders):
        scored = _scored(fit_ngram(corpus_sequences, order, start=start, smoothing=smoothing), token_ids, pairs)
        scored["tie"] = scored["ll_good"] == scored["ll_bad"]
        scored["half"] = scored["correct"].astype(float) - 0.5 * scored["tie"]  # a tie is right by the rule: half of it
        table = scored.groupby("paradigm", sort=True).agg(field=("field", "first"), accuracy=("half", "mean"),
                                                          pairs=("correct", "size"), ties=("tie", "sum"),
                                                          accuracy_ties_right=("correct", "mean"))
        frames.append(table.reset_index().assign(order=int(order)))
    out = pd.concat(frames, ignore_index=True)[list(ACCURACY_COLUMNS)]
    return out.astype({"order": np.int64, "accuracy": np.float64, "pairs": np.int64, "ties": np.int64,
                       "accuracy_ties_right": np.float64})


def best(table: pd.DataFrame) -> pd.DataFrame:
    """Per paradigm (sorted): field, accuracy (the best over orders), ties and order of the order
    that reaches it (the fewest ties, then the lowest order, among equals), from
    :func:`paradigm_accuracy`'s table (a tie counts half a pair there).

    Example::

        best(paradigm_accuracy(pairs, tok, corpus))   # paradigm, field, accuracy, ties, order
    """
    missing = [c for c in ("order", "paradigm", "field", "accuracy", "ties") if c not in table.columns]
    if missing:
        raise UserError(f"n-gram accuracy table lacks column {missing[0]!r} (make it with paradigm_accuracy)")
    ranked = table.sort_values(["paradigm", "accuracy", "ties", "order"], ascending=[True, False, True, True], kind="stable")
    return ranked.drop_duplicates("paradigm")[["paradigm", "field", "accuracy", "ties", "order"]].reset_index(drop=True)


__all__ = ["ACCURACY_COLUMNS", "DEFAULT_SMOOTHING", "MAX_ORDER", "MIN_ORDER", "NgramReference", "ORDERS", "SMOOTHINGS",
           "best", "fit_ngram", "paradigm_accuracy", "score_pairs", "sequence_logprob"]
