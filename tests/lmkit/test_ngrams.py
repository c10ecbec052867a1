"""N-gram references (stagewise.lmkit.ngrams): Laplace and Kneser-Ney probabilities against the
count ratios computed here by hand, every smoothing a distribution over its vocabulary, the
vectorized scorer against nltk's own ``score`` token by token, finite scores for unseen
tokens, the pair rule, and one UserError line per bad input. A word-level stub tokenizer
keeps it tokenizer-free; one test runs GPT-2's BPE on the shared TinyStories and Zorro data."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from lm_fixtures import SHARED_DATA

from stagewise.errors import UserError
from stagewise.lmkit import ngrams
from stagewise.lmkit.ngrams import (ACCURACY_COLUMNS, MAX_ORDER, MIN_ORDER, SMOOTHINGS, best, fit_ngram, paradigm_accuracy,
                                    score_pairs, sequence_logprob)
from stagewise.lmkit.scoring import encode_texts

SUM_TOL = 1e-12  # a distribution over the vocabulary sums to 1 (float64 round-off over a few terms)
CLOSED_TOL = 1e-12  # nltk's probabilities vs the count ratios computed here
START = 0
CORPUS = [[1, 2, 3], [1, 3], [2, 2, 1, 3], [4, 1, 2, 3, 1]]
UNSEEN = 99


class WordTokenizer:
    """Words to ids (a new id for each new word), BOS = 0: the call shape encode_texts uses."""

    bos_token_id = START

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}

    def __call__(self, texts, add_special_tokens=False):
        assert add_special_tokens is False
        return {"input_ids": [[self.ids.setdefault(w, len(self.ids) + 1) for w in t.split()] for t in texts]}


def bigram_counts(corpus):
    """c(h, w) over ``[start] + sequence`` and c(w) of the predicted tokens (the start excluded)."""
    pairs, words = Counter(), Counter()
    for seq in corpus:
        padded = [START, *seq]
        pairs.update(zip(padded[:-1], padded[1:]))
        words.update(seq)
    return pairs, words


def vocab_size(corpus):
    return len({t for seq in corpus for t in seq} | {START}) + 1  # + <UNK>


# ------------------------------------------------------------------------------ closed forms
def test_laplace_unigram_and_bigram_are_the_count_ratios():
    pairs, words = bigram_counts(CORPUS)
    v, n = vocab_size(CORPUS), sum(words.values())
    uni = fit_ngram(CORPUS, 1, start=START, smoothing="laplace")
    bi = fit_ngram(CORPUS, 2, start=START, smoothing="laplace")
    assert uni.vocab_size == bi.vocab_size == v and uni.n_tokens == n
    for w in [*words, UNSEEN]:
        assert uni.model.score(str(w)) == pytest.approx((words[w] + 1) / (n + v), abs=CLOSED_TOL)
        for h in [START, *words]:
            c_h = sum(c for (a, _), c in pairs.items() if a == h)
            assert bi.model.score(str(w), (str(h),)) == pytest.approx((pairs[h, w] + 1) / (c_h + v), abs=CLOSED_TOL)
    seq = [1, 2, UNSEEN, 3]
    by_hand = sum(math.log((pairs[h, w] + 1) / (sum(c for (a, _), c in pairs.items() if a == h) + v))
                  for h, w in zip([START, *seq[:-1]], seq))
    assert sequence_logprob(bi, [seq])[0] == pytest.approx(by_hand, abs=CLOSED_TOL)


def test_kneser_ney_bigram_is_the_interpolated_continuation_formula():
    d = ngrams.KN_DISCOUNT
    pairs, words = bigram_counts(CORPUS)
    v = vocab_size(CORPUS)
    followers = Counter(h for h, _ in pairs)  # N1+(h .)
    continuation = Counter(w for _, w in pairs)  # N1+(. w)
    types = len(continuation)

    def p_cont(w):
        return (max(continuation[w] - d, 0) + d * types / v) / len(pairs)

    def p(w, h):
        c_h = sum(c for (a, _), c in pairs.items() if a == h)
        if not c_h:
            return p_cont(w)
        return max(pairs[h, w] - d, 0) / c_h + d * followers[h] / c_h * p_cont(w)

    ref = fit_ngram(CORPUS, 2, start=START, smoothing="kneser_ney")
    for w in [*words, START, UNSEEN]:
        for h in [START, *words, UNSEEN]:
            assert ref.model.score(str(w), (str(h),)) == pytest.approx(p(w, h), abs=CLOSED_TOL)


@pytest.mark.parametrize("smoothing", SMOOTHINGS)
@pytest.mark.parametrize("order", [1, 2, 3, 4])
def test_every_smoothing_is_a_distribution_over_its_vocabulary(smoothing, order):
    ref = fit_ngram(CORPUS, order, start=START, smoothing=smoothing)
    vocab = list(ref.model.vocab)
    assert len(vocab) == ref.vocab_size == vocab_size(CORPUS)
    contexts = {(str(START),) * (order - 1), ("1", "2", "3")[-(order - 1):] if order > 1 else (),
                ("3",) * (order - 1), (str(UNSEEN),) * (order - 1)}
    for ctx in contexts:
        assert sum(ref.model.score(w, ctx or None) for w in vocab) == pytest.approx(1.0, abs=SUM_TOL)


# ------------------------------------------------------------------------------ the scorer
@pytest.mark.parametrize("smoothing", SMOOTHINGS)
@pytest.mark.parametrize("order", [1, 3, MAX_ORDER])
def test_scorer_equals_nltk_score_token_by_token_and_is_finite(smoothing, order):
    ref = fit_ngram(CORPUS, order, start=START, smoothing=smoothing)
    sequences = [[1, 2, 3, 1, 2, 3, 1], [3, 2, 1], [UNSEEN, UNSEEN + 1, 2], [UNSEEN], [], [2, 2, 2, 4, 4, 1, 3, 3, 2]]
    got = sequence_logprob(ref, sequences)
    assert got.dtype == np.float64 and got.shape == (len(sequences),) and np.all(np.isfinite(got))
    for seq, value in zip(sequences, got):
        padded = [START] * (order - 1) + seq
        expected = sum(math.log(ref.model.score(str(t), tuple(map(str, padded[i:i + order - 1])) or None))
                       for i, t in enumerate(seq))
        assert value == pytest.approx(expected, abs=1e-12)


def test_a_sequence_that_starts_with_the_start_token_gets_no_second_one():
    ref = fit_ngram(CORPUS, 3, start=START)
    with_start, without = sequence_logprob(ref, [[START, 1, 2], [1, 2]])
    assert with_start == without  # sequence_logprobs' (lm_eval's) rule: the start token is the context


def test_unigram_ties_permuted_sequences_exactly():
    ref = fit_ngram(CORPUS, 1, start=START)
    rng = np.random.default_rng(0)
    seq = [1, 2, 3, 4, UNSEEN, 2, 1, 3, 3, 2, 4, 1]
    shuffled = rng.permutation(seq).tolist()
    a, b = sequence_logprob(ref, [seq, shuffled])
    assert a == b  # terms added in ascending order: the same multiset, the same float


# ------------------------------------------------------------------------------ pairs
def pairs_frame(tok):
    """Good: a corpus sentence; bad: its order swapped (and one identical pair, one unseen word)."""
    rows = [("p1", "s", "the cat sat down", "down sat cat the"), ("p1", "s", "a dog ran home", "home a dog ran"),
            ("p2", "m", "the cat ran home", "the cat ran home"), ("p2", "m", "the zebra sat", "zebra the sat")]
    frame = pd.DataFrame(rows, columns=["paradigm", "field", "sentence_good", "sentence_bad"])
    frame.insert(1, "pair_id", np.arange(len(frame)))
    corpus = encode_texts(tok, ["the cat sat down", "a dog ran home", "the cat ran home", "the dog sat down"])
    return frame, corpus


def test_bigram_scores_a_seen_sentence_above_its_order_swapped_one_and_ties_right():
    tok = WordTokenizer()
    pairs, corpus = pairs_frame(tok)
    ref = fit_ngram(corpus, 2, start=tok.bos_token_id)
    scored = score_pairs(ref, tok, pairs)
    assert list(scored.columns) == [*pairs.columns, "ll_good", "ll_bad", "correct"]
    assert np.isfinite(scored[["ll_good", "ll_bad"]].to_numpy()).all()  # "zebra" was never seen
    assert (scored["ll_good"].iloc[:2] > scored["ll_bad"].iloc[:2]).all()
    assert scored["ll_good"].iloc[2] == scored["ll_bad"].iloc[2] and scored["correct"].iloc[2]
    texts = [" " + s for s in pairs["sentence_good"]]  # score_blimp's delimiter before each sentence
    assert np.array_equal(scored["ll_good"].to_numpy(), sequence_logprob(ref, encode_texts(tok, texts)))


def test_permuting_the_pairs_changes_no_score():
    tok = WordTokenizer()
    pairs, corpus = pairs_frame(tok)
    ref = fit_ngram(corpus, 3, start=tok.bos_token_id)
    scored = score_pairs(ref, tok, pairs)
    shuffled = score_pairs(ref, tok, pairs.sample(frac=1.0, random_state=1)).sort_index()
    pd.testing.assert_frame_equal(scored, shuffled)


def test_paradigm_accuracy_is_the_mean_of_score_pairs_and_best_takes_the_lowest_best_order():
    tok = WordTokenizer()
    pairs, corpus = pairs_frame(tok)
    table = paradigm_accuracy(pairs, tok, corpus, orders=(1, 2, 3))
    assert list(table.columns) == list(ACCURACY_COLUMNS) and len(table) == 3 * pairs["paradigm"].nunique()
    for order in (1, 2, 3):
        scored = score_pairs(fit_ngram(corpus, order, start=tok.bos_token_id), tok, pairs)
        tie = scored["ll_good"] == scored["ll_bad"]
        expected = scored.assign(tie=tie, half=np.where(tie, 0.5, scored["correct"].astype(float))).groupby("paradigm")
        got = table[table["order"] == order].set_index("paradigm")
        assert np.array_equal(got["accuracy_ties_right"].to_numpy(), expected["correct"].mean().to_numpy())
        assert np.allclose(got["accuracy"].to_numpy(), expected["half"].mean().to_numpy(), rtol=0, atol=1e-15)  # a tie: half
        assert np.array_equal(got["pairs"].to_numpy(), expected["correct"].size().to_numpy())
        assert np.array_equal(got["ties"].to_numpy(), expected["tie"].sum().to_numpy())
    made = pd.DataFrame({"order": [1, 2, 3, 4, 1, 2, 3], "paradigm": ["a"] * 4 + ["b"] * 3, "field": ["f"] * 7,
                         "accuracy": [0.5, 0.7, 0.7, 0.7, 0.9, 0.1, 0.9], "pairs": [10] * 7, "ties": [0, 3, 1, 1, 2, 0, 2]})
    top = best(made)  # the best accuracy; among equals the fewest ties, then the lowest order
    assert top.to_dict(orient="records") == [{"paradigm": "a", "field": "f", "accuracy": 0.7, "ties": 1, "order": 3},
                                             {"paradigm": "b", "field": "f", "accuracy": 0.9, "ties": 2, "order": 1}]


# ------------------------------------------------------------------------------ bad input
@pytest.mark.parametrize("order", [MIN_ORDER - 1, MAX_ORDER + 1, 2.0, True, "2"])
def test_a_bad_order_is_one_line(order):
    with pytest.raises(UserError, match=r"order=.* is not allowed: give an integer from 1 to 6"):
        fit_ngram(CORPUS, order, start=START)


@pytest.mark.parametrize("corpus", [[], [[]], [[], []]])
def test_an_empty_corpus_is_one_line(corpus):
    with pytest.raises(UserError, match="corpus has no tokens"):
        fit_ngram(corpus, 2, start=START)


def test_other_bad_inputs_are_one_line():
    with pytest.raises(UserError, match="smoothing='mle' is not allowed: give one of kneser_ney, witten_bell"):
        fit_ngram(CORPUS, 2, start=START, smoothing="mle")
    tok = WordTokenizer()
    pairs, corpus = pairs_frame(tok)
    ref = fit_ngram(corpus, 2, start=START)
    with pytest.raises(UserError, match="lack column 'sentence_bad'"):
        score_pairs(ref, tok, pairs.drop(columns="sentence_bad"))
    with pytest.raises(UserError, match="give at least one order"):
        paradigm_accuracy(pairs, tok, corpus, orders=())
    with pytest.raises(UserError, match="order=9 is not allowed"):
        paradigm_accuracy(pairs, tok, corpus, orders=(2, 9))
    with pytest.raises(UserError, match="lacks column 'order'"):
        best(pd.DataFrame({"paradigm": ["a"]}))


# ------------------------------------------------------------------------------ shared data
def test_tinystories_and_zorro_with_gpt2_bpe():
    text, zorro = SHARED_DATA / "text" / "tinystories_10k.txt", SHARED_DATA / "zorro"
    if not (text.is_file() and zorro.is_dir()):
        pytest.skip(f"shared data not found ({text}, {zorro}): set STAGEWISE_SHARED_DATA")
    from stagewise.lmkit import gpt2_bpe
    from stagewise.lmkit.probesets import read_pairs

    tok = gpt2_bpe()
    lines = [line for line in Path(text).read_text(encoding="utf-8").split("\n")[:2000] if line.strip()]
    corpus = encode_texts(tok, lines)
    names = ["argument_structure-swapped_arguments", "case-subjective_pronoun", "irregular-verb"]
    pairs = read_pairs(zorro, names, limit=50)
    table = paradigm_accuracy(pairs, tok, corpus, orders=(1, 2))
    assert len(table) == 2 * len(names) and table["accuracy"].between(0, 1).all() and (table["pairs"] == 50).all()
    assert set(best(table)["order"]) <= {1, 2}
    unigram = score_pairs(fit_ngram(corpus, 1, start=tok.bos_token_id), tok, pairs)
    assert np.isfinite(unigram[["ll_good", "ll_bad"]].to_numpy()).all()
    good, bad = (encode_texts(tok, [" " + s for s in pairs[c]]) for c in ("sentence_good", "sentence_bad"))
    same_tokens = np.array([sorted(g) == sorted(b) for g, b in zip(good, bad)])  # word-order swaps
    assert same_tokens.any()
    assert (unigram["ll_good"] == unigram["ll_bad"]).to_numpy()[same_tokens].all()  # a unigram model cannot tell them apart
