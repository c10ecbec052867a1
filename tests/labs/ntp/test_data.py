"""Tests of the NTP lab's datasets: validation, Example 1, generator, JSON loading (20,000
samples validated in seconds), tensors."""

from __future__ import annotations

import json
from itertools import product

import pytest
import torch

from costbudget import cpu_seconds  # this process and its reaped children: CPU, not moved by load
from stagewise.errors import UserError
from stagewise.labs.ntp.data import (
    build_dataset,
    example1,
    load_json_dataset,
    random_dataset,
    to_tensors,
)

TOKENS = ("S", "V", "O", "P")
COLLOCATION_SAMPLES = [("S", "V"), ("V", "O"), ("O", "P"), ("P", "S")]
# Example 1's samples of length >= 2.
EXAMPLE1_LONG = [("S V", "O"), ("V O", "P"), ("O P", "P"), ("P S", "V"), ("S V O", "P")]


def names(ds, ids):
    return {ds.tokens[i] for i in ids}


def messages(samples, **kwargs) -> str:
    with pytest.raises(UserError) as info:
        build_dataset(TOKENS, samples, **kwargs)
    return "\n".join(info.value.messages)


# --- Example 1 -------------------------------------------------------------------------


def test_example1_samples_weights_collocation():
    ds = example1()
    assert len(ds.samples) == 9
    assert ds.weights == pytest.approx([1 / 9] * 9)
    assert [ds.tokens[ds.collocation[ds.index(t)]] for t in TOKENS] == ["V", "O", "P", "S"]
    rendered = [(ds.render(s), ds.tokens[s.next]) for s in ds.samples]
    assert rendered[:4] == [("S", "V"), ("V", "O"), ("O", "P"), ("P", "S")]
    assert ("S V O", "P") in rendered and ("O P", "P") in rendered
    keys = [(len(s.input), s.input, s.next) for s in ds.samples]
    assert keys == sorted(keys)
    # Optimal token: the one whose collocation is the next token.
    for sample, best in zip(ds.samples, ds.optimal_token):
        assert ds.collocation[best] == sample.next and best in sample.input


def test_example1_partial_orders_and_token_types():
    ds = example1()
    expected = {
        "S": ({("S", "P")}, {"S"}, {"P"}, {"V", "O"}),
        "V": ({("V", "S")}, {"V"}, {"S"}, {"O", "P"}),
        "O": ({("O", "S"), ("O", "V")}, {"O"}, {"S", "V"}, {"P"}),
        "P": ({("O", "P")}, {"O"}, {"P"}, {"S", "V"}),
    }
    assert names(ds, ds.structure) == set(expected)
    for q, (relations, optimal, non_optimal, non_comparable) in expected.items():
        st = ds.structure[ds.index(q)]
        assert {(ds.tokens[a], ds.tokens[b]) for a, b in st.relations} == relations
        assert names(ds, st.optimal) == optimal
        assert names(ds, st.non_optimal) == non_optimal
        assert names(ds, st.non_comparable) == non_comparable


# --- building, merging, inference -------------------------------------------------------


def test_duplicates_merged_and_empirical_weights():
    samples = [("S V", "O"), ("S V", "O"), ("S V", "O"), ([0, 1, 2], 3)]
    ds = build_dataset(TOKENS, samples, collocation={"S": "V", "V": "O", "O": "P", "P": "S"})
    assert len(ds.samples) == 6  # 4 added collocation samples + 2 distinct sentences
    weights = {(ds.render(s), s.next): w for s, w in zip(ds.samples, ds.weights)}
    assert weights[("S V", 2)] == pytest.approx(3 / 8)
    assert weights[("S", 1)] == pytest.approx(1 / 8)
    assert sum(ds.weights) == pytest.approx(1.0)
    uniform = build_dataset(TOKENS, samples + COLLOCATION_SAMPLES, weights="uniform")
    assert uniform.weights == pytest.approx([1 / 6] * 6)


def test_collocation_inferred_without_length_one_samples():
    ds = build_dataset(TOKENS, EXAMPLE1_LONG + [("V P", "O"), ("V S", "V")])
    assert ds.collocation == example1().collocation
    assert len(ds.samples) == 4 + 7  # the length-1 samples were added
    partial = build_dataset(TOKENS, EXAMPLE1_LONG, collocation={"S": "V"})
    assert partial.collocation == example1().collocation
    assert {(s.input, s.next) for s in partial.samples} == {(s.input, s.next) for s in example1().samples}


def test_collocation_that_cannot_be_inferred_names_tokens():
    text = messages(EXAMPLE1_LONG)  # two collocations fit these sentences
    assert "collocation of token 'S' cannot be inferred" in text
    assert "add a sample {input: [S], next: ...}" in text


# --- rejections ---------------------------------------------------------------------------


def test_cycle_rejected():
    text = messages(COLLOCATION_SAMPLES + [("S V P", "O"), ("V S P", "V")])
    assert "cycle under query 'P': S > V > S" in text
    assert '"S V P" -> O' in text and '"V S P" -> V' in text


def test_long_cycle_rejected():
    text = messages(COLLOCATION_SAMPLES + [("S V P", "O"), ("V O P", "P"), ("O S P", "V")])
    assert "cycle under query 'P': S > O > V > S" in text


def test_confused_token_rejected():
    text = messages(COLLOCATION_SAMPLES + [("S V P", "O"), ("V O P", "P")])
    assert "token 'V' is confused under query 'P'" in text
    assert "above 'S' in \"S V P\" -> O" in text and "below 'O' in \"V O P\" -> P" in text


def test_non_injective_collocation_rejected():
    text = messages([("S", "V"), ("V", "V"), ("O", "P"), ("P", "S")])
    assert "non-injective collocation: tokens 'S' and 'V' both map to 'V'" in text
    assert '"S" -> V' in text and '"V" -> V' in text
    text = messages([("S", "V")], collocation={"V": "V", "O": "P", "P": "S"})
    assert "both map to 'V'" in text and "collocation entry 'V': 'V'" in text


def test_assumption3_breach_rejected():
    text = messages(COLLOCATION_SAMPLES + [("S V V P", "V")])
    assert 'Assumption 3 fails in sample "S V V P" -> V' in text
    assert "'S' appears once" in text and "'V' appears 2 times" in text


def test_unknown_tokens_rejected():
    text = messages(COLLOCATION_SAMPLES + [("S X P", "O"), ("S V", "Y"), ([7], "S")])
    assert "unknown token 'X' in sample \"S X P\" -> O" in text
    assert "unknown token 'Y' as next token of sample \"S V\" -> Y" in text
    assert "unknown token index 7" in text
    assert 'allowed tokens are those in "tokens"' in text


def test_inconsistent_next_rejected():
    text = messages(COLLOCATION_SAMPLES + [("S V", "O"), ("S V", "P")])
    assert "the same input has 2 different next tokens" in text
    assert '"S V" -> O' in text and '"S V" -> P' in text
    text = messages(COLLOCATION_SAMPLES + [("S V", "S")])
    assert "inconsistent next token in sample \"S V\" -> S" in text
    assert "collocation 'S'" in text


def test_every_violation_reported_at_once():
    with pytest.raises(UserError) as info:
        build_dataset(TOKENS, COLLOCATION_SAMPLES + [("S X", "O"), ("S V", "S"), ("S V V P", "V")])
    assert len(info.value.messages) == 3


def test_structural_rejections():
    assert "the dataset is empty (no samples)" in messages([])
    with pytest.raises(UserError, match="token list is empty"):
        build_dataset([], [("S", "V")])
    with pytest.raises(UserError, match="duplicate token name 'S'"):
        build_dataset(("S", "V", "S"), [("S", "V")])
    assert "empty input" in messages(COLLOCATION_SAMPLES + [([], "S")])
    assert "more than max_len=2" in messages(COLLOCATION_SAMPLES + [("S V O", "P")], max_len=2)
    with pytest.raises(UserError, match="weights"):
        build_dataset(TOKENS, COLLOCATION_SAMPLES, weights="softmax")


# --- JSON -----------------------------------------------------------------------------------


def test_json_roundtrip(tmp_path):
    path = tmp_path / "ex.json"
    samples = [{"input": s.split(), "next": n} for s, n in COLLOCATION_SAMPLES + EXAMPLE1_LONG]
    path.write_text('{"tokens": ["S", "V", "O", "P"], "samples": %s}' % str(samples).replace("'", '"'))
    ds = load_json_dataset(path, weights="uniform")
    assert ds.samples == example1().samples and ds.weights == example1().weights


def test_json_errors(tmp_path):
    bad = tmp_path / "foo.json"
    bad.write_text('{"tokens": ["A", "B"],\n "samples": [\n  {"input": ["A"] "next": "B"}]}')
    with pytest.raises(UserError) as info:
        load_json_dataset(bad)
    assert "foo.json is not valid JSON: Expecting ',' delimiter at line 3, column 19" in str(info.value)
    empty = tmp_path / "empty.json"
    empty.write_text('{"tokens": ["A", "B"], "samples": []}')
    with pytest.raises(UserError, match=r"empty.json: the dataset is empty \(no samples\)"):
        load_json_dataset(empty)
    schema = tmp_path / "schema.json"
    schema.write_text('{"tokens": ["A", "B"], "samples": [{"input": ["A"], "next": "B"}, {"input": ["A"]}]}')
    with pytest.raises(UserError, match=r'samples\[1\] is missing "next"'):
        load_json_dataset(schema)
    nosamples = tmp_path / "nosamples.json"
    nosamples.write_text('{"tokens": ["A", "B"]}')
    with pytest.raises(UserError, match='missing "samples"'):
        load_json_dataset(nosamples)
    unknown = tmp_path / "unknown.json"
    unknown.write_text('{"tokens": ["A", "B"], "samples": [{"input": ["A"], "next": "C"}]}')
    with pytest.raises(UserError, match="unknown.json: unknown token 'C'"):
        load_json_dataset(unknown)
    with pytest.raises(UserError, match="not found"):
        load_json_dataset(tmp_path / "missing.json")


# --- generator ------------------------------------------------------------------------------


def _signature(ds):
    return ds.samples, ds.weights, ds.collocation


@pytest.mark.parametrize("options", [{}, {"complete": True}, {"prefix_closed": True},
                                     {"complete": True, "prefix_closed": True, "weights": "uniform"}])
def test_generator_deterministic_and_realizable(options):
    first = random_dataset(20, seed=3, **options)
    assert _signature(first) == _signature(random_dataset(20, seed=3, **options))
    assert _signature(first) != _signature(random_dataset(20, seed=4, **options))
    assert first.tokens == tuple(f"t{i}" for i in range(20))
    assert sorted(first.collocation) == list(range(20))
    for st in first.structure.values():  # no confused tokens
        greater = {a for a, _ in st.relations}
        lesser = {b for _, b in st.relations}
        assert not greater & lesser
        # q is never optimal for itself in generated sentences (prefixes may make it so).
        assert options.get("prefix_closed") or st.query in st.non_optimal
    assert first.max_len <= 8


def test_generator_complete_covers_pairs():
    ds = random_dataset(30, seed=0, complete=True)
    for st in ds.structure.values():
        assert set(st.relations) == set(product(st.optimal, st.non_optimal))


def test_generator_prefix_closed_keeps_prefixes():
    ds = random_dataset(12, seed=1, prefix_closed=True, sentences_per_query=8)
    present = {(s.input, s.next) for s in ds.samples}
    long = [s for s in ds.samples if len(s.input) >= 3]
    for s in long:
        for j in range(2, len(s.input)):
            assert (s.input[:j], s.input[j]) in present


def test_generator_small_and_large_vocab():
    with pytest.raises(UserError, match="data.vocab_size=2 is too small: the generator needs at least 3 tokens"):
        random_dataset(2, seed=0)
    for seed in range(5):
        assert random_dataset(3, seed=seed, complete=True, max_len=3).vocab_size == 3
    start = cpu_seconds()
    ds = random_dataset(300, seed=0)
    assert cpu_seconds() - start < 1.5
    assert ds.vocab_size == 300 and len(ds.structure) == 300


# --- tensors ----------------------------------------------------------------------------------


def test_to_tensors_shapes_and_padding():
    ds = example1()
    t = to_tensors(ds, max_len=5, n_samples=12)
    assert t["idx"].shape == t["mask"].shape == t["opt_mask"].shape == (12, 5)
    assert t["idx"].dtype == torch.long and t["mask"].dtype == torch.bool
    assert t["weight"].dtype == torch.float64 and t["weight"][9:].eq(0).all()
    assert t["weight"].sum().item() == pytest.approx(1.0)
    for i, sample in enumerate(ds.samples):
        length = len(sample.input)
        assert t["idx"][i, :length].tolist() == list(sample.input)
        assert t["mask"][i].tolist() == [True] * length + [False] * (5 - length)
        assert t["query"][i] == sample.input[-1] and t["next"][i] == sample.next
        assert t["opt_mask"][i].tolist() == [j < length and sample.input[j] == ds.optimal_token[i]
                                            for j in range(5)]
    assert t["mask"][9:].tolist() == [[True, False, False, False, False]] * 3
    assert t["opt_mask"][9:, 0].all() and t["next"][9:].eq(0).all() and t["idx"][9:].eq(0).all()
    assert to_tensors(ds, max_len=3)["idx"].shape == (9, 3)
    with pytest.raises(UserError, match="max_len=2"):
        to_tensors(ds, max_len=2)
    with pytest.raises(UserError, match="n_samples=5"):
        to_tensors(ds, max_len=3, n_samples=5)


def test_ntp_20k_sample_file_validates_quickly(tmp_path):
    """20,000 distinct valid samples: query q's optimal tokens are q+1..q+5, its
    non-optimal ones q+100..q+149 (mod |V|), so every sentence is realizable."""
    import random

    from stagewise.labs.ntp.data import load_json_dataset

    vocab, rng = 200, random.Random(0)
    samples = [{"input": [f"t{i}"], "next": f"t{(i + 1) % vocab}"} for i in range(vocab)]
    seen: set[tuple[int, ...]] = set()
    while len(samples) < 20_000:
        q = rng.randrange(vocab)
        o = (q + rng.randrange(1, 6)) % vocab
        body = [o] + rng.sample([(q + j) % vocab for j in range(100, 150)], rng.randrange(0, 4))
        rng.shuffle(body)
        inp = tuple(body + [q])
        if inp not in seen:
            seen.add(inp)
            samples.append({"input": [f"t{x}" for x in inp], "next": f"t{(o + 1) % vocab}"})
    path = tmp_path / "ok.json"
    path.write_text(json.dumps({"tokens": [f"t{i}" for i in range(vocab)], "samples": samples}))
    start = cpu_seconds()
    ds = load_json_dataset(path)
    assert len(ds.samples) == 20_000 and cpu_seconds() - start < 20
