"""A researcher's own probe sets (stagewise.lmkit.probesets, issue 39) on a tiny random GPT-2:
every record checked against an independent computation (the model's own ``labels=`` loss,
one forward per question or window, a plain argmax, the BLiMP scorer), closed forms of the
frequency buckets, batched == one row at a time, and one UserError line per bad input."""

from __future__ import annotations

import dataclasses
import functools
import json
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
import torch
from lm_fixtures import SHARED_DATA
from transformers import GPT2Config, GPT2LMHeadModel

from stagewise.errors import UserError
from stagewise.lmkit import gpt2_bpe
from stagewise.lmkit import probesets as ps
from stagewise.lmkit.blimp import FIELD_ALIASES, blimp_accuracy, score_blimp
from stagewise.lmkit.probesets import frequency_buckets, measure, read_pairs, read_probe_set, token_logprobs

TOL = 1e-6  # float32 model: our batched log-probabilities vs HF's own loss, relative
TEXT = ("The river ran past the old mill, and the miller watched it every morning. "
        "He counted the boats that went down to the sea, and the boats that came back. "
        "In winter the river froze, and the children of the village skated on it until dark. "
        "The miller's daughter kept a book of every boat's name; the book grew thick with the years. "
        "When the mill stopped turning, the river still ran, and the book stayed on the shelf by the window. ") * 2
REFERENCE = "the the the the river river river mill mill boat a a a a a and and and"

# (prompt, answer, group, kind): the prompts end in distinct tokens, so a bigram push (Forced) sets each top-1
QUESTIONS = [("The capital of France is", " Paris", "capital", None),
             ("Japan's capital city:", " Tokyo", "capital", None),
             ("Angola lies in", " Africa", "continent", None),
             ("Peru is on the continent of", " South America", "continent", None),
             ("Zbigniew studies", " ornithological taxonomy", None, None),
             ("Laos lies within", " Asia", None, "region")]
KIND_WORDS = {"region": frozenset({"europe", "asia"})}
PUSHED = [" Paris", " Paris", " Tokyo", " Africa", " Paris", " Europe"]  # each question's forced top-1
# by construction: its own answer; another answer of its group; an answer of another group; another answer of its
# group; no group (nothing is type-correct); a word of its kind's lexicon
BUILT = ["semantic_correct", "type_correct", "type_wrong", "type_correct", "type_wrong", "type_correct"]


# ------------------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def tok():
    return gpt2_bpe()


@pytest.fixture(scope="module")
def model(tok):
    torch.manual_seed(0)
    # a wide init (0.5, GPT-2's is 0.02): peaked, context-dependent predictions, so losses and argmaxes differ
    config = GPT2Config(vocab_size=len(tok), n_layer=1, n_embd=32, n_head=2, n_positions=128, initializer_range=0.5)
    return GPT2LMHeadModel(config).eval()


class Forced(torch.nn.Module):
    """``base``'s logits plus ``bonus`` on token ``pushes[t]`` wherever the input token is ``t`` (a bigram push)."""

    def __init__(self, base: torch.nn.Module, pushes: dict[int, int], bonus: float = 100.0):
        super().__init__()
        self.base = base
        self.src = torch.tensor(list(pushes))  # (K,)
        self.dst = torch.tensor(list(pushes.values()))  # (K,)
        self.bonus = bonus

    def forward(self, input_ids, attention_mask=None):
        logits = self.base(input_ids=input_ids, attention_mask=attention_mask).logits  # (B, L, V)
        hit = (input_ids[..., None] == self.src).to(logits.dtype)  # (B, L, K)
        push = torch.nn.functional.one_hot(self.dst, logits.shape[-1]).to(logits.dtype)  # (K, V)
        return SimpleNamespace(logits=logits + self.bonus * hit @ push)  # (B, L, V)


def ids(tok, text: str) -> list[int]:
    return list(tok(text, add_special_tokens=False)["input_ids"])


def one_token(tok, text: str) -> int:
    got = ids(tok, text)
    assert len(got) == 1, f"{text!r} is {len(got)} tokens in GPT-2's BPE"
    return got[0]


def write_questions(path: Path, rows=QUESTIONS) -> Path:
    records = [{"prompt": p, "answer": a, **({"group": g} if g else {}), **({"kind": k} if k else {})} for p, a, g, k in rows]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


@pytest.fixture
def forced(tok, model):
    last = [ids(tok, p)[-1] for p, *_ in QUESTIONS]
    assert len(set(last)) == len(last), "the prompts must end in distinct tokens"
    return Forced(model, {t: one_token(tok, w) for t, w in zip(last, PUSHED)}).eval()


def one_line(fn, *args, **kwargs) -> str:
    """The message of the UserError ``fn`` raises, checked to be one line."""
    with pytest.raises(UserError) as err:
        fn(*args, **kwargs)
    assert len(err.value.lines) == 1 and "\n" not in err.value.lines[0], err.value.lines
    return err.value.lines[0]


# ------------------------------------------------------------------------------ text
def exact_buckets(tokens: list[int], vocab: int, buckets: int) -> list[int]:
    """The closed form in integers: types ranked by count (ties by id), a type's bucket is
    floor(B x occurrences of the more frequent types / all occurrences); unseen: the last."""
    counts = Counter(tokens)
    out, before = [buckets - 1] * vocab, 0
    for t in sorted(counts, key=lambda t: (-counts[t], t)):
        out[t] = min(buckets - 1, before * buckets // len(tokens))
        before += counts[t]
    return out


def test_frequency_buckets_are_the_closed_form_of_cumulative_mass():
    # 5 types, 12 occurrences: counts 4, 4, 2, 1, 1 (ties by id), B = 3 cut at 4 and 8 occurrences
    tokens = [7] * 4 + [2] * 4 + [5] * 2 + [9] + [0]
    got = frequency_buckets(torch.tensor(tokens), 12, 3).tolist()
    assert got == exact_buckets(tokens, 12, 3)
    assert got[2] == 0 and got[7] == 1  # equal counts: the lower id ranks first, and starts at mass 0
    assert got[5] == 2  # preceded by exactly 8 of 12 = 2/3 of the mass: the third bucket (not 2/3 - 1 ulp)
    assert all(got[t] == 2 for t in (1, 3, 4, 6, 8, 10, 11))  # never seen: the last bucket
    ranked = sorted(set(tokens), key=lambda t: (-tokens.count(t), t))
    assert [got[t] for t in ranked] == sorted(got[t] for t in ranked)  # more frequent: never a later bucket
    equal = [0, 1, 3, 5, 7]  # 5 types of one occurrence each, B = 5: the k-th (by id) alone in bucket k
    assert frequency_buckets(torch.tensor(equal), 8, 5)[equal].tolist() == list(range(5))
    generator = torch.Generator().manual_seed(0)
    for _ in range(300):  # random cases, many with cut points exactly at b/B
        vocab, buckets = int(torch.randint(1, 12, (1,), generator=generator)), int(torch.randint(1, 8, (1,), generator=generator))
        sample = torch.randint(0, vocab, (int(torch.randint(1, 40, (1,), generator=generator)),), generator=generator)
        assert frequency_buckets(sample, vocab, buckets).tolist() == exact_buckets(sample.tolist(), vocab, buckets)


def reference_text(model, tokens: list[int], window: int, prefix: int) -> tuple[float, list[float]]:
    """(HF's labels= loss over the windows, token-weighted; each token's -log P), one forward per window."""
    total, nll = 0.0, []
    for start in range(0, len(tokens), window):
        chunk = torch.tensor([[prefix, *tokens[start:start + window]]])  # (1, 1 + w)
        out = model(input_ids=chunk, labels=chunk)
        total += float(out.loss) * (chunk.shape[1] - 1)
        logp = torch.log_softmax(out.logits[0, :-1].double(), -1)  # (w, V)
        nll += (-logp.gather(-1, chunk[0, 1:, None])[:, 0]).tolist()
    return total / len(tokens), nll


def test_text_loss_is_the_models_own_loss_over_the_windows_and_buckets_split_it(tmp_path, tok, model):
    path = tmp_path / "heldout.txt"
    path.write_text(TEXT)
    tokens = ids(tok, TEXT)
    s = read_probe_set("held", "text", path, tok, window=16, buckets=3)
    with torch.no_grad():
        out = measure(model, [s])
        loss, nll = reference_text(model, tokens, 16, tok.eos_token_id)
    assert out["held.loss"] == pytest.approx(loss, rel=TOL)
    bucket = exact_buckets(tokens, len(tok), 3)  # counted in the probe text itself (no frequency file)
    per: dict[int, list[float]] = {}
    for t, v in zip(tokens, nll):
        per.setdefault(bucket[t], []).append(v)
    assert sorted(per) == [0, 1, 2]
    for b, values in per.items():
        assert out[f"held.loss.bucket_{b + 1}"] == pytest.approx(sum(values) / len(values), rel=TOL)
    weighted = sum(out[f"held.loss.bucket_{b + 1}"] * len(v) for b, v in per.items()) / len(tokens)
    assert weighted == pytest.approx(out["held.loss"], rel=1e-12)
    assert len(set(round(out[f"held.loss.bucket_{b + 1}"], 3) for b in per)) == 3  # the buckets tell tokens apart


def test_a_reference_text_ranks_the_tokens_and_unseen_ones_are_in_the_last_bucket(tmp_path, tok):
    (tmp_path / "heldout.txt").write_text(TEXT)
    (tmp_path / "corpus.txt").write_text(REFERENCE)
    s = read_probe_set("held", "text", tmp_path / "heldout.txt", tok, window=32, buckets=4, frequency=tmp_path / "corpus.txt")
    assert s.frequency_bucket is not None
    expected = exact_buckets(ids(tok, REFERENCE), len(tok), 4)
    scored = s.frequency_bucket[:, 1:] >= 0  # (N, L-1)
    got = s.frequency_bucket[:, 1:][scored].tolist()
    assert got == [expected[t] for t in ids(tok, TEXT)]
    unseen = [t for t in ids(tok, TEXT) if t not in set(ids(tok, REFERENCE))]
    assert unseen and all(expected[t] == 3 for t in unseen)
    (tmp_path / "empty.txt").write_text("")
    assert "frequency reference text has no tokens" in one_line(
        read_probe_set, "held", "text", tmp_path / "heldout.txt", tok, frequency=tmp_path / "empty.txt")


def test_windows_change_the_context_not_the_tokens_scored(tmp_path, tok, model):
    path = tmp_path / "heldout.txt"
    path.write_text(TEXT)
    n = len(ids(tok, TEXT))
    losses = {}
    for window in (8, 40, 120):
        s = read_probe_set("held", "text", path, tok, window=window, context=128)
        assert s.frequency_bucket is not None
        assert int((s.frequency_bucket >= 0).sum()) == int((s.lengths - 1).sum()) == n
        assert len(s.lengths) == -(-n // window)
        losses[window] = measure(model, [s])["held.loss"]
    assert len({round(v, 6) for v in losses.values()}) == 3  # another context, another loss
    limited = read_probe_set("held", "text", path, tok, window=8, limit=20)
    assert int((limited.lengths - 1).sum()) == 20  # limit: the first 20 tokens
    assert "longer than the model's context" in one_line(read_probe_set, "held", "text", path, tok, window=128, context=128)
    (tmp_path / "one.txt").write_text("Hello")
    assert "at least 2" in one_line(read_probe_set, "held", "text", tmp_path / "one.txt", tok)


def test_batching_changes_nothing(tmp_path, tok, model, monkeypatch):
    (tmp_path / "heldout.txt").write_text(TEXT)
    sets = [read_probe_set("held", "text", tmp_path / "heldout.txt", tok, window=24, buckets=2),
            read_probe_set("facts", "questions", write_questions(tmp_path / "q.jsonl"), tok, kind_words=KIND_WORDS)]
    with torch.no_grad():
        for s in sets:
            logp, top = token_logprobs(model, s.ids, s.lengths)
            one_logp, one_top = token_logprobs(model, s.ids, s.lengths, batch_tokens=1)  # one row per forward
            assert logp.shape[0] > 1
            torch.testing.assert_close(logp, one_logp, rtol=0, atol=TOL * float(logp.abs().max()))
            real = torch.arange(1, s.ids.shape[1])[None, :] < s.lengths[:, None]  # (N, L-1) positions predicted
            assert torch.equal(top[real], one_top[real])
    batched = measure(model, sets)
    monkeypatch.setattr(ps, "token_logprobs", functools.partial(token_logprobs, batch_tokens=1))
    looped = measure(model, sets)
    assert looped.keys() == batched.keys()
    assert all(looped[k] == pytest.approx(batched[k], rel=TOL) for k in batched)


# ------------------------------------------------------------------------------ questions
def test_question_loss_is_the_models_own_loss_on_the_answer_tokens(tmp_path, tok, model):
    s = read_probe_set("facts", "questions", write_questions(tmp_path / "q.jsonl"), tok, kind_words=KIND_WORDS)
    losses, hits = [], []
    with torch.no_grad():
        for prompt, answer, *_ in QUESTIONS:
            p, w = ids(tok, prompt), ids(tok, prompt + answer)
            assert w[:len(p)] == p  # the answer's tokens follow the prompt's
            row = torch.tensor([[tok.eos_token_id, *w]])  # (1, 1 + len(w))
            labels = torch.tensor([[-100] * (1 + len(p)) + w[len(p):]])  # only the answer's tokens
            out = model(input_ids=row, labels=labels)
            losses.append(float(out.loss))  # HF: mean -log P over the answer's tokens
            hits.append(int(out.logits[0, len(p)].argmax()) == w[len(p)])  # the position after the prompt
        got = measure(model, [s])
    assert got["facts.loss"] == pytest.approx(sum(losses) / len(losses), rel=TOL)
    assert got["facts.accuracy"] == got["facts.share.semantic_correct"] == sum(hits) / len(hits)
    assert sum(got[f"facts.share.{c}"] for c in ps.CATEGORIES) == pytest.approx(1.0, abs=1e-12)


def independent_categories(tok, model) -> tuple[list[int], list[str]]:
    """(top-1 after each prompt, its category) with one forward per question and the rule in words."""
    first = [ids(tok, prompt + answer)[len(ids(tok, prompt))] for prompt, answer, *_ in QUESTIONS]
    top, names = [], []
    for i, (prompt, _, group, kind) in enumerate(QUESTIONS):
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([[tok.eos_token_id, *ids(tok, prompt)]])).logits  # (1, L, V)
        t = int(logits[0, -1].argmax())
        key = kind or group
        others = {first[j] for j, q in enumerate(QUESTIONS) if key and (q[3] or q[2]) == key and first[j] != first[i]}
        lexicon = KIND_WORDS.get(kind or "", frozenset())
        typed = t in others or tok.decode([t]).strip().lower() in lexicon
        top.append(t)
        names.append("semantic_correct" if t == first[i] else "type_correct" if typed else "type_wrong")
    return top, names


def test_category_shares_and_group_accuracy_equal_an_independent_argmax(tmp_path, tok, forced):
    s = read_probe_set("facts", "questions", write_questions(tmp_path / "q.jsonl"), tok, kind_words=KIND_WORDS)
    got = measure(forced, [s])
    top, names = independent_categories(tok, forced)
    assert names == BUILT  # the forced model hits every category, type_correct by group and by lexicon
    assert [tok.decode([t]) for t in top] == PUSHED
    for c in ps.CATEGORIES:
        assert got[f"facts.share.{c}"] == names.count(c) / len(names)
    assert sum(got[f"facts.share.{c}"] for c in ps.CATEGORIES) == pytest.approx(1.0, abs=1e-12)
    right: dict[str, list[bool]] = {}
    for (_, _, group, _), name in zip(QUESTIONS, names):
        if group is not None:
            right.setdefault(group, []).append(name == "semantic_correct")
    groups = {k.split(".")[2]: v for k, v in got.items() if k.startswith("facts.group.")}
    assert groups == {g: sum(v) / len(v) for g, v in right.items()}
    assert got["facts.accuracy"] == names.count("semantic_correct") / len(names)


def test_categorize_shares_count_the_names_it_returns(tmp_path, tok, forced):
    seen: list[list[str]] = []

    def categorize(questions, predictions):
        seen.append(list(predictions))
        return ["echo" if p.strip() and q.answer.startswith(p) else "city" if p.strip() in ("Paris", "Tokyo") else "other"
                for q, p in zip(questions, predictions)]

    s = read_probe_set("facts", "questions", write_questions(tmp_path / "q.jsonl"), tok, kind_words=KIND_WORDS,
                       categorize=categorize, categories=["echo", "city", "other", "never"])
    got = measure(forced, [s])
    top, _ = independent_categories(tok, forced)
    assert seen[-1] == [tok.decode([t]) for t in top]  # the predictions it is given: the top-1 tokens as text
    returned = Counter(categorize(s.questions, seen[-1]))
    assert len(returned) == 3  # not all one name
    for name in ("echo", "city", "other", "never"):
        assert got[f"facts.share.{name}"] == returned.get(name, 0) / len(QUESTIONS)
    assert all(got[f"facts.share.{c}"] >= 0 for c in ps.CATEGORIES)  # the built-in shares stay beside them


class DroppingTokenizer:
    """GPT-2's tokenizer that drops one character before encoding (as a normalizing tokenizer may)."""

    def __init__(self, tok, drop: str):
        self.tok, self.drop = tok, drop

    def __call__(self, texts, **kwargs):
        return self.tok([t.replace(self.drop, "") for t in texts], **kwargs)

    def __len__(self):
        return len(self.tok)

    def __getattr__(self, name):
        return getattr(self.tok, name)


def test_bad_questions_are_one_line_each(tmp_path, tok):
    good = json.dumps({"prompt": "The capital of France is", "answer": " Paris"})
    cases = {"missing.jsonl": (good + "\n" + json.dumps({"prompt": "Rome is in"}) + "\n", ["line 2", "missing key 'answer'"]),
             "broken.jsonl": (good + "\n\n{not json\n", ["line 3", "not valid JSON"]),
             "empty.jsonl": (json.dumps({"prompt": "x", "answer": "  "}) + "\n", ["line 1", "'answer' is empty"]),
             "typed.jsonl": (json.dumps({"prompt": "x", "answer": 3}) + "\n", ["line 1", "'answer' must be str"]),
             "grouped.jsonl": (json.dumps({"prompt": "x", "answer": " y", "group": 1}) + "\n", ["line 1", "'group' must be str"]),
             "none.jsonl": ("\n", ["no questions"])}
    for name, (text, words) in cases.items():
        (tmp_path / name).write_text(text)
        message = one_line(read_probe_set, "facts", "questions", tmp_path / name, tok)
        assert str(tmp_path / name) in message and all(w in message for w in words), message
    path = write_questions(tmp_path / "q.jsonl")
    assert "probe set name" in one_line(read_probe_set, "my facts", "questions", path, tok)
    assert "allowed: questions, text, pairs" in one_line(read_probe_set, "facts", "essay", path, tok)
    assert "give its path" in one_line(read_probe_set, "facts", "questions", None, tok)
    assert "context is 4" in one_line(read_probe_set, "facts", "questions", path, tok, context=4)
    (tmp_path / "zw.jsonl").write_text(json.dumps({"prompt": "The capital of France is", "answer": "\u200b"}) + "\n")
    message = one_line(read_probe_set, "facts", "questions", tmp_path / "zw.jsonl", DroppingTokenizer(tok, "\u200b"))
    assert "line 1" in message and "adds no token" in message


def test_a_bad_categorize_is_one_line(tmp_path, tok, model):
    path = write_questions(tmp_path / "q.jsonl")
    n = len(QUESTIONS)

    def read(fn, categories=("a", "b")):
        return read_probe_set("facts", "questions", path, tok, categorize=fn, categories=list(categories))

    assert "returned 'c' for line 1" in one_line(read, lambda q, p: ["c"] * n)  # undeclared, seen at once
    assert f"returned 1 names for {n} questions" in one_line(read, lambda q, p: ["a"])
    assert "give a list of category names" in one_line(read, lambda q, p: "a")
    assert "declare the names" in one_line(read, lambda q, p: ["a"] * n, categories=())
    assert "declare the names" in one_line(read, lambda q, p: ["a b"] * n, categories=("a b",))  # not a metric name
    assert "give a function" in one_line(read, "not a function")
    late = read(lambda q, p: ["a" if not x else "zz" for x in p])  # undeclared only for real predictions
    model.train()
    try:
        assert "returned 'zz'" in one_line(measure, model, [late])
        assert model.training and all(m.training for m in model.modules())  # the mode is put back on an error too
    finally:
        model.eval()


# ------------------------------------------------------------------------------ pairs
BLIMP_PAIRS = {
    "anaphor_gender_agreement": ("morphology", [("Katherine can't help herself.", "Katherine can't help himself."),
                                                ("Many teenagers were helping themselves.", "Many teenagers were helping herself."),
                                                ("The boy hurt himself.", "The boy hurt herself.")]),
    "principle_A_case_2": ("syntax/semantics", [("Lisa thinks she is nice.", "Lisa thinks herself is nice."),
                                                ("Eric imagines himself taking every rug.", "Eric imagines himself took every rug.")]),
    "adjunct_island": ("syntax", [("Who should Derek hug after shocking Richard?", "Who should Derek hug Richard after shocking?"),
                                  ("Who will Katherine discover without hiring Erin?", "Who will Katherine discover Erin without hiring?")]),
}
ZORRO = {"agreement_subject_verb-across_prepositional_phrase": [("The dogs near the tree barks .", "The dogs near the tree bark ."),
                                                                ("The girl with the hats sing .", "The girl with the hats sings .")],
         "agreement_subject_verb-in_simple_question": [("Where does the dogs go ?", "Where do the dogs go ?")],
         "binding-principle_a": [("Mary saw himself .", "Mary saw herself ."), ("Tom hurt herself .", "Tom hurt himself ."),
                                 ("The boys helped itself .", "The boys helped themselves .")]}


def write_blimp(folder: Path) -> Path:
    folder.mkdir()
    for paradigm, (field, pairs) in BLIMP_PAIRS.items():
        lines = [json.dumps({"sentence_good": g, "sentence_bad": b, "field": field, "linguistics_term": "t", "UID": paradigm,
                             "pairID": str(i)}) for i, (g, b) in enumerate(pairs)]
        (folder / f"{paradigm}.jsonl").write_text("\n".join(lines) + "\n")
    return folder


def write_zorro(folder: Path) -> Path:
    folder.mkdir()
    for paradigm, pairs in ZORRO.items():  # odd lines bad, even lines good
        (folder / f"{paradigm}.txt").write_text("".join(f"{bad}\n{good}\n" for bad, good in pairs))
    (folder / "LICENSE").write_text("not a paradigm\n")
    return folder


def sentence_logprob(tok, model, sentence: str) -> float:
    """Total log P(" " + sentence) after the prefix token: HF's mean loss times the token count."""
    row = torch.tensor([[tok.eos_token_id, *ids(tok, " " + sentence)]])
    with torch.no_grad():
        return -float(model(input_ids=row, labels=row).loss) * (row.shape[1] - 1)


def records_of(frame: pd.DataFrame, right: list[bool], name: str) -> dict[str, float]:
    """The pairs records of a frame of pairs (field, paradigm) from per-pair correctness."""
    frame = frame.assign(right=[float(r) for r in right])
    out = {f"{name}.accuracy": float(frame["right"].mean())}
    out.update({f"{name}.field.{f}.accuracy": float(v) for f, v in frame.groupby("field")["right"].mean().items()})
    out.update({f"{name}.paradigm.{p}.accuracy": float(v) for p, v in frame.groupby("paradigm")["right"].mean().items()})
    return out


def test_blimp_pairs_equal_the_blimp_scorer_and_an_independent_loss(tmp_path, tok, model):
    folder = write_blimp(tmp_path / "blimp")
    s = read_probe_set("blimp", "pairs", folder, tok)
    assert s.pairs is not None
    got = measure(model, [s])
    result = blimp_accuracy(score_blimp(model, tok, s.pairs))
    assert got["blimp.accuracy"] == pytest.approx(result.accuracy, abs=1e-12)
    assert {r.field: r.accuracy for r in result.fields.itertuples()} == pytest.approx(
        {k.split(".")[2]: v for k, v in got.items() if k.startswith("blimp.field.")}, abs=1e-12)
    assert {r.paradigm: r.accuracy for r in result.paradigms.itertuples()} == pytest.approx(
        {k.split(".")[2]: v for k, v in got.items() if k.startswith("blimp.paradigm.")}, abs=1e-12)
    rows = [(p, FIELD_ALIASES.get(f, f), g, b) for p, (f, pairs) in BLIMP_PAIRS.items() for g, b in pairs]
    margins = [sentence_logprob(tok, model, g) - sentence_logprob(tok, model, b) for _, _, g, b in rows]
    assert min(abs(m) for m in margins) > 1e-3  # no pair near a tie: the comparison below is not round-off
    frame = pd.DataFrame([r[:2] for r in rows], columns=["paradigm", "field"])
    assert records_of(frame, [m >= 0 for m in margins], "blimp") == pytest.approx(got, abs=1e-12)
    assert 0 < got["blimp.accuracy"] < 1  # the random model gets some right and some wrong
    swapped = dataclasses.replace(s, pairs=s.pairs.rename(columns={"sentence_good": "sentence_bad", "sentence_bad": "sentence_good"}))
    assert measure(model, [swapped])["blimp.accuracy"] == pytest.approx(1 - got["blimp.accuracy"])  # no ties


def test_zorro_odd_lines_are_bad_even_lines_good_and_the_field_is_the_phenomenon(tmp_path, tok, model):
    folder = write_zorro(tmp_path / "zorro")
    pairs = read_pairs(folder)
    expected = pd.DataFrame([(p, p.split("-", 1)[0], g, b) for p in sorted(ZORRO) for b, g in ZORRO[p]],
                            columns=["paradigm", "field", "sentence_good", "sentence_bad"])
    pd.testing.assert_frame_equal(pairs[list(expected.columns)], expected)
    assert pairs.groupby("paradigm")["pair_id"].apply(list).to_dict() == {p: list(range(len(v))) for p, v in ZORRO.items()}
    assert len(read_pairs(folder, limit=1)) == len(ZORRO)  # the first pair of each paradigm
    assert set(read_pairs(folder, ["binding-principle_a"])["paradigm"]) == {"binding-principle_a"}
    got = measure(model, [read_probe_set("zorro", "pairs", folder, tok)])
    result = blimp_accuracy(score_blimp(model, tok, expected.assign(pair_id=0, linguistics_term="")))
    assert {k: v for k, v in got.items() if ".field." in k} == pytest.approx(
        {f"zorro.field.{r.field}.accuracy": r.accuracy for r in result.fields.itertuples()}, abs=1e-12)
    assert {"zorro.field.agreement_subject_verb.accuracy", "zorro.field.binding.accuracy"} <= set(got)
    assert got["zorro.accuracy"] == pytest.approx(result.accuracy, abs=1e-12)
    (folder / "odd-one.txt").write_text("a bad one .\n")
    assert "odd (bad) and an even" in one_line(read_pairs, folder)
    assert "no Zorro paradigm 'nope'" in one_line(read_pairs, folder, ["nope"])


def shared(name: str) -> Path:
    folder = SHARED_DATA / name
    if not folder.is_dir():
        pytest.skip(f"needs the shared data's {name}/ ({folder} is absent)")
    return folder


def test_shared_blimp_and_zorro_read_and_score_like_the_blimp_scorer(tok, model):
    blimp = shared("blimp")
    chosen = sorted(p.stem for p in blimp.glob("*.jsonl"))[:3]
    s = read_probe_set("blimp", "pairs", blimp, tok, paradigms=chosen, limit=3)
    assert s.pairs is not None and len(s.pairs) == 9
    got = measure(model, [s])
    result = blimp_accuracy(score_blimp(model, tok, s.pairs))
    assert got["blimp.accuracy"] == pytest.approx(result.accuracy, abs=1e-12)
    assert {f"blimp.paradigm.{r.paradigm}.accuracy": r.accuracy for r in result.paradigms.itertuples()} == pytest.approx(
        {k: v for k, v in got.items() if ".paradigm." in k}, abs=1e-12)
    zorro = shared("zorro")
    chosen = sorted(p.stem for p in zorro.glob("*.txt"))[:3]
    pairs = read_pairs(zorro, chosen, limit=2)
    for paradigm, rows in pairs.groupby("paradigm"):
        lines = [line.strip() for line in (zorro / f"{paradigm}.txt").read_text().split("\n") if line.strip()]
        assert rows["sentence_bad"].tolist() == lines[0:4:2] and rows["sentence_good"].tolist() == lines[1:4:2]
        assert set(rows["field"]) == {str(paradigm).split("-", 1)[0]}
    got = measure(model, [read_probe_set("zorro", "pairs", zorro, tok, paradigms=chosen, limit=2)])
    assert got["zorro.accuracy"] == pytest.approx(blimp_accuracy(score_blimp(model, tok, pairs)).accuracy, abs=1e-12)


# ------------------------------------------------------------------------------ the model's mode
def test_measure_leaves_the_models_mode_as_it_was(tmp_path, tok, model):
    (tmp_path / "heldout.txt").write_text(TEXT)
    s = read_probe_set("held", "text", tmp_path / "heldout.txt", tok, window=32)
    try:
        for training in (True, False):
            model.train(training)
            first = measure(model, [s])
            assert all(m.training == training for m in model.modules())
            assert measure(model, [s]) == first  # in eval mode whatever the mode: dropout off, the same numbers
            assert not torch.is_inference_mode_enabled() and torch.is_grad_enabled()
    finally:
        model.eval()
