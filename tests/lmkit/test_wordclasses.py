"""The paper's categories on raw text (the ``words`` probe kind, stagewise.lmkit.wordclasses) on
a seeded tiny GPT-2 with a BPE trained on the fixture corpus: the scored positions equal the
text's whole words found by a regex on the characters (token offsets), and the records equal a
Python loop over those positions, one window per forward pass; the lexicon files, the config
and the tagger (spaCy, skipped when absent) are checked, bad input one line each."""

from __future__ import annotations

import json
import math
import re
import sys
import types

import numpy as np
import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from stagewise.config import validate
from stagewise.errors import UserError
from stagewise.labs.lm.config import Config
from stagewise.labs.lm.track import probe_sets
from stagewise.lmkit.corpora import train_bpe
from stagewise.lmkit.probesets import measure, read_probe_set
from stagewise.lmkit.wordclasses import CONTENT_CLASSES, read_lexicon, tag_lexicon, word_positions, write_lexicon

WINDOW = 24
LEXICON = {**dict.fromkeys(["the", "a", "her", "his"], "DET"),
           **dict.fromkeys(["cat", "dog", "girl", "boy", "ball", "tree", "park", "hat", "mom"], "NOUN"),
           **dict.fromkeys(["lily", "tom", "zebedee"], "PROPN"),
           **dict.fromkeys(["saw", "liked", "found", "chased", "ran", "was"], "VERB"),
           **dict.fromkeys(["big", "red", "old", "happy"], "ADJ"), **dict.fromkeys(["quickly", "then"], "ADV"),
           **dict.fromkeys(["to", "in", "under", "near"], "ADP"), **dict.fromkeys(["she", "he", "it"], "PRON"),
           "and": "CCONJ", "don't": "AUX", "do": "VERB"}
WORD = re.compile(r"[A-Za-z]+(?:'[a-z]+)?")


def story(rng: np.random.Generator, sentences: int) -> str:
    """Sentences from templates: frequent words (whole tokens), rare ones (split), quotes, apostrophes, lines."""
    subjects = ["The cat", "The dog", "A girl", "Her mom", "Tom", "Lily", "The boy", "Zebedee", "She"]
    verbs = ["saw", "liked", "found", "chased", "was near"]
    objects = ["the ball", "a big tree", "the old park", "his red hat", "her dog", "the xylophone", "Lily's ball"]
    ends = [".", ".", "!", " quickly.", " in the park.", " and ran to the tree."]
    out = []
    for i in range(sentences):
        sentence = f"{rng.choice(subjects)} {rng.choice(verbs)} {rng.choice(objects)}{rng.choice(ends)}"
        if i % 7 == 3:
            sentence = f'"{sentence[:-1]}?" he asked. "I don\'t know," she said.'
        out.append(sentence + ("\n" if i % 4 == 3 else " "))
    return "".join(out)


@pytest.fixture(scope="module")
def setting(tmp_path_factory):
    """(tokenizer, trained model, held-out text path, lexicon path)."""
    tmp = tmp_path_factory.mktemp("words")
    rng = np.random.default_rng(0)
    train, held = story(rng, 400), "The dog saw it. " + story(rng, 60) + "Then Tom saw the dog"  # whole words first, last
    tok = train_bpe([train], 300)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_layer=1, n_embd=32, n_head=2, n_positions=64,
                                       bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id))
    ids = torch.tensor(tok(train, add_special_tokens=False)["input_ids"])
    n = len(ids) // WINDOW
    batch = torch.cat([torch.full((n, 1), tok.eos_token_id), ids[: n * WINDOW].reshape(n, WINDOW)], 1)  # (n, W + 1)
    optimizer = torch.optim.Adam(model.parameters(), lr=5e-3)
    for _ in range(40):  # a little training: exact and same-class predictions both occur
        loss = model(input_ids=batch, labels=batch).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    (tmp / "held.txt").write_text(held)
    return tok, model.eval(), tmp / "held.txt", write_lexicon(LEXICON, tmp / "classes.json")


def one_line(fn, *args, **kwargs) -> str:
    """The message of the UserError ``fn`` raises, checked to be one line."""
    with pytest.raises(UserError) as err:
        fn(*args, **kwargs)
    assert len(err.value.lines) == 1 and "\n" not in err.value.lines[0], err.value.lines
    return err.value.lines[0]


def class_of(tok, row: int) -> str | None:
    """A row's class: its string (one leading space at most) a word of the lexicon."""
    text = tok.convert_tokens_to_string([tok.convert_ids_to_tokens(row)])
    core = text[1:] if text.startswith(" ") else text
    return LEXICON.get(core.lower()) if WORD.fullmatch(core) else None


def reference(tok, model, text: str) -> dict[str, float]:
    """The records by brute force: the whole words found on the characters (a regex word after a
    space, a newline or the start, exactly one token's span with its space), then one forward
    pass per window and a Python loop over the positions."""
    encoded = tok(text, add_special_tokens=False, return_offsets_mapping=True)
    tokens, spans = encoded["input_ids"], [tuple(s) for s in encoded["offset_mapping"]]
    gold = {}  # token index -> class
    for m in WORD.finditer(text):
        a, b = m.span()
        if m.group().lower() not in LEXICON:
            continue
        if a > 0 and text[a - 1] == " " and (a - 1, b) in spans:
            gold[spans.index((a - 1, b))] = LEXICON[m.group().lower()]
        elif (a == 0 or text[a - 1] == "\n") and (a, b) in spans:
            gold[spans.index((a, b))] = LEXICON[m.group().lower()]
    counts = {"": dict.fromkeys(("exact", "same_class", "other"), 0), "content.": dict.fromkeys(("exact", "same_class", "other"), 0)}
    nll = []
    for start in range(0, len(tokens), WINDOW):
        row = torch.tensor([[tok.eos_token_id, *tokens[start:start + WINDOW]]])
        with torch.no_grad():
            logp = torch.log_softmax(model(input_ids=row).logits[0].double(), -1)  # (len, V)
        for col in range(1, row.shape[1]):
            i = start + col - 1
            if i not in gold:
                continue
            top = int(logp[col - 1].argmax())
            category = "exact" if top == tokens[i] else "same_class" if class_of(tok, top) == gold[i] else "other"
            counts[""][category] += 1
            if gold[i] in CONTENT_CLASSES:
                counts["content."][category] += 1
            nll.append(-float(logp[col - 1, tokens[i]]))
    out = {"loss": sum(nll) / len(nll)}
    for prefix, c in counts.items():
        total = sum(c.values())
        out[f"{prefix}positions"] = float(total)
        out.update({f"{prefix}share.{k}": v / total for k, v in c.items()})
        out[f"{prefix}share.class_correct"] = (c["exact"] + c["same_class"]) / total
    return out


# ------------------------------------------------------------------------------ the records
def test_word_categories_equal_a_loop_over_the_texts_whole_words(setting):
    tok, model, held, classes = setting
    s = read_probe_set("words", "words", held, tok, classes=classes, window=WINDOW)
    got = {k.removeprefix("words."): v for k, v in measure(model, [s]).items()}
    want = reference(tok, model, held.read_text())
    assert set(got) == set(want)
    assert got["positions"] == want["positions"] and got["content.positions"] == want["content.positions"]
    for key in want:
        assert got[key] == pytest.approx(want[key], rel=1e-6, abs=1e-12), key
    positions = want["positions"]
    assert all(want[f"share.{c}"] * positions >= 5 for c in ("exact", "same_class", "other")), want  # none vacuous
    assert 0 < want["content.positions"] < positions
    content = want["content.positions"]
    assert want["content.share.exact"] * content >= 5 and want["content.share.same_class"] * content >= 3, want
    for prefix in ("", "content."):
        assert sum(got[f"{prefix}share.{c}"] for c in ("exact", "same_class", "other")) == pytest.approx(1.0, abs=1e-12)
        assert got[f"{prefix}share.class_correct"] == pytest.approx(got[f"{prefix}share.exact"] +
                                                                    got[f"{prefix}share.same_class"], abs=1e-12)
    assert s.words.scored[:, 0].sum() == 0 and s.words.scored.sum() == positions
    assert bool(s.words.scored[0, 1]) and tok.decode(s.ids[0, 1]) == "The"  # the text's first token starts a line
    last = int(s.lengths[-1]) - 1  # "... saw the dog": the text's last token is a scored whole word
    assert bool(s.words.scored[-1, last]) and tok.decode(s.ids[-1, last]) == " dog"


def test_scored_positions_on_hand_made_rows():
    """Closed form: the rule on row strings of GPT-2's kind, across window boundaries."""
    strings = ["<eot>", " the", " dog", "'s", " ran", "\n", "The", "'", "t", "ing", " Dog"]
    text = ["The", " dog", "'s", " ran", "\n", "The", " dog", "'", "t", " the", " Dog", "ing", " ran"]
    stream = torch.tensor([strings.index(x) for x in text])
    window = 4
    body = torch.zeros(4 * window, dtype=torch.long)
    body[: len(stream)] = stream
    ids = torch.cat([torch.zeros((4, 1), dtype=torch.long), body.reshape(4, window)], 1)  # (4 * window,) -> (4, 1 + window)
    lengths = torch.tensor([5, 5, 5, 2])
    words = word_positions("hand", ids, lengths, strings, {"the": "DET", "dog": "NOUN", "ran": "VERB"})
    real = torch.arange(1, window + 1)[None, :] < lengths[:, None]  # (4, window)
    assert words.scored[:, 1:][real].nonzero().flatten().tolist() == [0, 3, 5, 9, 12]  # the rest continue or are no word
    assert words.classes == ("DET", "NOUN", "VERB") and words.class_of_row.tolist() == [-1, 0, 1, -1, 2, -1, 0, -1, -1, -1, 1]
    assert words.gold_class[words.scored].tolist() == [0, 2, 0, 0, 2] and words.content.tolist() == [False, True, True]


def test_a_limit_and_a_window_cut_the_text_like_the_text_kind(setting):
    tok, model, held, classes = setting
    words = read_probe_set("words", "words", held, tok, classes=classes, window=WINDOW, limit=100)
    text = read_probe_set("text", "text", held, tok, window=WINDOW, limit=100)
    assert torch.equal(words.ids, text.ids) and torch.equal(words.lengths, text.lengths)
    assert words.kind == "words" and text.words is None
    got = measure(model, [words, text])
    assert got["words.positions"] <= 100 and got["words.content.positions"] <= got["words.positions"]
    assert got["words.loss"] != got["text.loss"]  # the words' loss is over the scored positions only


# ------------------------------------------------------------------------------ bad input
def test_bad_lexicons_and_sets_are_one_line_each(tmp_path, setting):
    tok, _, held, classes = setting
    path = tmp_path / "lex.json"
    for content, expected in [("{", "not valid JSON"), ('["the"]', "a JSON object {word: CLASS}, got list"),
                              ("{}", "lexicon is empty"), ('{"The": "DET"}', "word 'The': the lexicon's words are lower-cased"),
                              ('{"the": "det"}', "word 'the': class 'det' is not a class name"),
                              ('{"the": 3}', "class 3 is not a class name")]:
        path.write_text(content)
        assert expected in one_line(read_lexicon, path), content
    assert "not found" in one_line(read_lexicon, tmp_path / "none.json") or "no such" in one_line(read_lexicon, tmp_path / "none.json")
    assert "give classes=, the word-class lexicon file" in one_line(read_probe_set, "w", "words", held, tok)
    assert "classes= is for kind=words only (this is text)" in one_line(read_probe_set, "t", "text", held, tok, classes=classes)
    assert "no frequency buckets" in one_line(read_probe_set, "w", "words", held, tok, classes=classes, buckets=2)
    path.write_text(json.dumps({"xylophone": "NOUN"}))  # never one token here
    assert "no token of the text is a whole word of the lexicon" in one_line(read_probe_set, "w", "words", held, tok,
                                                                             classes=path)
    assert "window=64" in one_line(read_probe_set, "w", "words", held, tok, classes=classes, window=64, context=64)
    assert "lower-cased" in one_line(write_lexicon, {"Dog": "NOUN"}, tmp_path / "out.json")


# ------------------------------------------------------------------------------ the config
TRACKED = {"task": {"name": "none"}, "source": {"kind": "tracked"}, "baselines": {"kinds": []}}


def config_error(probes: list[dict]) -> str:
    with pytest.raises(UserError) as err:
        validate(Config, {**TRACKED, "probes": probes})
    assert len(err.value.lines) == 1 and "\n" not in err.value.lines[0], err.value.lines
    return err.value.lines[0]


def test_a_words_probe_config_validates_and_builds_its_set(setting):
    tok, model, held, classes = setting
    c = validate(Config, {**TRACKED, "probes": [{"name": "w", "kind": "words", "path": str(held), "classes": str(classes),
                                                 "window": WINDOW, "limit": 200}]})
    (s,) = probe_sets(c, tok)
    assert s.kind == "words" and s.ids.shape[1] == WINDOW + 1 and int(s.lengths.sum()) - len(s.lengths) == 200
    assert set(measure(model, [s])) >= {"w.share.exact", "w.content.share.other", "w.loss"}
    text = {"name": "t", "kind": "text", "path": str(held)}
    assert "classes: only for kind=words" in config_error([{**text, "classes": str(classes)}])
    assert "classes: give the word-class lexicon file" in config_error([{**text, "kind": "words"}])
    assert "buckets/frequency: only for kind=text" in config_error([{**text, "kind": "words", "classes": "c.json",
                                                                     "buckets": 3}])
    assert "window: only for kind=text or words" in config_error([{**text, "kind": "questions", "window": 3}])


# ------------------------------------------------------------------------------ the tagger
class StubToken:
    def __init__(self, text: str, pos: str):
        self.text, self.pos_ = text, pos


def test_lexicon_majority_ties_and_dropped_tags_with_a_stub_pipeline(monkeypatch):
    """The rule of tag_lexicon on given tags: the majority tag, ties alphabetically, dropped
    majority tags, non-words skipped, lines tagged one by one."""
    tagged = {"Run run": [("Run", "VERB"), ("run", "NOUN")], "run run": [("run", "VERB"), ("run", "NOUN")],
              "The 2 , two": [("The", "DET"), ("2", "NUM"), (",", "PUNCT"), ("two", "NUM")],
              "Can't": [("Can't", "AUX")]}
    seen = []

    class Nlp:
        def pipe(self, lines, batch_size):
            for line in lines:
                seen.append(line)
                yield [StubToken(t, p) for t, p in tagged[line]]

    monkeypatch.setitem(sys.modules, "spacy", types.SimpleNamespace(load=lambda name, disable: Nlp()))
    got = tag_lexicon(["Run run\n\nrun run", "The 2 , two\nCan't"])
    assert got == {"can't": "AUX", "run": "NOUN", "the": "DET"}  # run: VERB 2, NOUN 2 -> NOUN; two: NUM dropped
    assert seen == ["Run run", "run run", "The 2 , two", "Can't"]
    monkeypatch.setitem(sys.modules, "spacy", None)  # not installed
    assert "pip install -e '.[tagger]'" in one_line(tag_lexicon, ["a"])
    assert "one string" in one_line(tag_lexicon, "a b")


def test_tagger_builds_a_lexicon_the_words_kind_reads(tmp_path, setting):
    pytest.importorskip("spacy", reason="the optional tagger extra (pip install -e '.[tagger]') is not installed")
    try:
        lexicon = tag_lexicon(["The dog runs in the park. Two happy girls saw the dog!", "She quickly found her red ball."])
    except UserError as err:
        pytest.skip(f"spaCy's model is not installed: {err}")
    assert lexicon["the"] == "DET" and lexicon["dog"] == "NOUN" and lexicon["saw"] == "VERB"
    assert lexicon["quickly"] == "ADV" and lexicon["happy"] == "ADJ" and lexicon["in"] == "ADP"
    assert "two" not in lexicon and "." not in lexicon and all(w == w.lower() for w in lexicon)  # NUM, PUNCT dropped
    path = write_lexicon(lexicon, tmp_path / "classes.json")
    assert read_lexicon(path) == lexicon
    tok, model, held, _ = setting
    got = measure(model, [read_probe_set("w", "words", held, tok, classes=path, window=WINDOW)])
    assert got["w.positions"] > 0 and math.isfinite(got["w.loss"])
    assert "cannot be loaded" in one_line(tag_lexicon, ["a"], model="no_such_spacy_model")
