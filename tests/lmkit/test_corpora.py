"""Corpus tools of the pretraining study (stagewise.lmkit.corpora): the shuffled-words control
keeps every sentence's words and final mark and the lines (deterministic per seed); the BPE is
deterministic and survives save/load; pair coverage equals counts done by hand; and the neutral
minimal-pair format read back equals the Zorro folder it was written from, frame and records."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest
import torch
from lm_fixtures import SHARED_DATA
from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel

from stagewise.errors import UserError
from stagewise.lmkit import gpt2_bpe
from stagewise.lmkit.corpora import (END_OF_TEXT, pair_coverage, paradigm_coverage, read_neutral_pairs, sentences,
                                     shuffle_words, split_final_mark, train_bpe, word_counts, write_pairs_jsonl)
from stagewise.lmkit.probesets import measure, read_pairs, read_probe_set
from stagewise.lmkit.scoring import prefix_token_id

STORY = ('Once upon a time, there was a little girl named Lily. She loved to play in the park with her dog!\n'
         'One day, Lily saw a big red ball under the old tree. "Can I have it?" she asked her mom.\n'
         '\n'
         'Her mom said, "Yes, you can." Lily was so happy. She ran to the tree and took the ball.\n'
         'Hello. Yes! Why? The end\n'
         '  The dog barked at the cat ,  and the cat ran up the tree .  \n')
ZORRO = {"agreement_subject_verb-across_prepositional_phrase": [("The dog near the trees bark.", "The dog near the trees barks."),
                                                                ("A cat by the doors run.", "A cat by the doors runs.")],
         "binding-principle_a": [("Mary saw himself.", "Mary saw herself."), ("Tom hurt herself.", "Tom hurt himself."),
                                 ("Ann likes himself.", "Ann likes herself.")]}


def one_line(fn, *args, **kwargs) -> str:
    """The message of the UserError ``fn`` raises, checked to be one line."""
    with pytest.raises(UserError) as err:
        fn(*args, **kwargs)
    assert len(err.value.lines) == 1 and "\n" not in err.value.lines[0], err.value.lines
    return err.value.lines[0]


# ------------------------------------------------------------------------------ sentences and the shuffle
def test_sentences_split_after_marks_and_keep_them():
    assert sentences(STORY)[:5] == ["Once upon a time, there was a little girl named Lily.",
                                    "She loved to play in the park with her dog!",
                                    "One day, Lily saw a big red ball under the old tree.", '"Can I have it?"',
                                    "she asked her mom."]
    assert sentences("Hello. Yes! Why? The end") == ["Hello.", "Yes!", "Why?", "The end"]
    assert sentences('He said "Hi." Then\n\n  \nno mark') == ['He said "Hi."', "Then", "no mark"]


def shuffle_invariants(text: str, seed: int) -> None:
    """Per line the same sentences, each with the same multiset of words (its final mark split
    off) and the same mark, the mark last."""
    out = shuffle_words(text, seed)
    assert out.count("\n") == text.count("\n")
    for before, after in zip(text.split("\n"), out.split("\n"), strict=True):
        old, new = sentences(before), sentences(after)
        assert len(old) == len(new), (before, after)
        for a, b in zip(old, new):
            (wa, ma), (wb, mb) = split_final_mark(a.split()), split_final_mark(b.split())
            assert Counter(wa) == Counter(wb) and ma == mb, (a, b)
            assert not ma or b.endswith(ma)


def test_shuffle_keeps_words_marks_and_lines_and_is_seeded():
    for seed in range(5):
        shuffle_invariants(STORY, seed)
    assert shuffle_words(STORY, 3) == shuffle_words(STORY, 3)
    assert shuffle_words(STORY, 3) != shuffle_words(STORY, 4)
    assert shuffle_words(STORY, 3) != shuffle_words(STORY, 3).replace("\n", " ")  # lines kept
    one_word = "Hello.\nYes!\nWhy?\nOk\n\"Fine.\""
    assert all(shuffle_words(one_word, s) == one_word for s in range(4))  # one word: nothing to permute
    out = shuffle_words(STORY, 0).split("\n")
    assert out[2] == "" and out[4].startswith("Hello. Yes! Why? ")  # the empty line kept, one-word sentences too
    assert any(sentences(shuffle_words(STORY, s))[0] != sentences(STORY)[0] for s in range(3))  # words do move
    assert out[5].endswith(".") and "cat ," not in out[5]  # the lone mark joined the sentence's end
    assert "seed=-1" in one_line(shuffle_words, STORY, -1)


def test_shuffle_invariants_on_the_shared_stories():
    path = SHARED_DATA / "text" / "tinystories_10k.txt"
    if not path.is_file():
        pytest.skip(f"shared data absent: {path}")
    text = "\n".join(path.read_text().split("\n")[:300])
    shuffle_invariants(text, 0)
    assert word_counts([shuffle_words(text, 0)]) == word_counts([text])  # word statistics kept


# ------------------------------------------------------------------------------ BPE
def test_bpe_is_deterministic_round_trips_and_prefixes_with_end_of_text(tmp_path):
    corpus = [STORY * 20]
    a, b = train_bpe(corpus, 400), train_bpe(corpus, 400)
    assert a.get_vocab() == b.get_vocab()
    merges = [json.loads(t.backend_tokenizer.to_str())["model"]["merges"] for t in (a, b)]
    assert merges[0] == merges[1] and len(merges[0]) > 0
    assert 300 < len(a) <= 400  # merges stop where no pair is seen min_frequency times
    eot = a.convert_tokens_to_ids(END_OF_TEXT)
    assert prefix_token_id(a) == eot == a.bos_token_id == a.eos_token_id == a.pad_token_id == a.unk_token_id
    ids = a(STORY, add_special_tokens=False)["input_ids"]
    assert a.decode(ids) == STORY  # byte level: lossless
    assert a("Zebra ü €", add_special_tokens=False)["input_ids"]  # unseen bytes still encode
    a.save_pretrained(tmp_path / "bpe")
    back = AutoTokenizer.from_pretrained(tmp_path / "bpe")
    assert back(STORY, add_special_tokens=False)["input_ids"] == ids
    assert prefix_token_id(back) == eot and back.get_vocab() == a.get_vocab()


def test_bad_vocab_sizes_are_one_line():
    for bad in (256, 1_000_001, True, 3.5, "512"):
        assert "vocab_size=" in one_line(train_bpe, [STORY], bad)
    assert "min_frequency=0" in one_line(train_bpe, [STORY], 300, min_frequency=0)
    assert "one string" in one_line(train_bpe, STORY, 300)


# ------------------------------------------------------------------------------ coverage
def test_word_counts_and_pair_coverage_equal_counts_by_hand():
    corpus = ["The cat sat. The cat's hat!", "the dog sat on THE mat", "A dog"]
    counts = word_counts(corpus)
    assert counts == Counter({"the": 4, "cat": 1, "sat": 2, "cat's": 1, "hat": 1, "dog": 2, "on": 1, "mat": 1, "a": 1})
    pairs = pd.DataFrame({"paradigm": ["p1", "p1", "p2", "p3"], "pair_id": [0, 1, 0, 0], "field": ["f", "f", "g", "h"],
                          "sentence_good": ["The dog sat.", "The cat sat.", "A dog sat", "..."],
                          "sentence_bad": ["The dog sat the.", "Dog the sat.", "Dogs sat", "!"]})
    got = pair_coverage(pairs, counts, min_count=2)
    # by hand: seen >= 2 are the, sat, dog; pair tokens with repetition
    expected_known = [1.0, 5 / 6, 3 / 5, 0.0]  # cat (once) unknown; a (once) and dogs (never) unknown; no word
    assert got["known_share"].tolist() == pytest.approx(expected_known, abs=1e-12)
    assert got["covered"].tolist() == [True, False, False, False]  # a pair without words is not covered
    assert list(got.columns) == [*pairs.columns, "covered", "known_share"]
    table = paradigm_coverage(got)
    assert table["paradigm"].tolist() == ["p1", "p2", "p3"] and table["field"].tolist() == ["f", "g", "h"]
    assert table["pairs"].tolist() == [2, 1, 1] and table["covered_pairs"].tolist() == [1, 0, 0]
    assert table["covered_share"].tolist() == [0.5, 0.0, 0.0]
    assert table["known_share"].tolist() == pytest.approx([(1 + 5 / 6) / 2, 3 / 5, 0.0], abs=1e-12)
    assert pair_coverage(pairs, counts, min_count=1)["covered"].tolist() == [True, True, False, False]
    assert "min_count=0" in one_line(pair_coverage, pairs, counts, min_count=0)
    assert "lack column(s) sentence_bad" in one_line(pair_coverage, pairs.drop(columns="sentence_bad"), counts)


# ------------------------------------------------------------------------------ neutral pairs
def write_zorro(folder: Path) -> Path:
    folder.mkdir()
    for paradigm, pairs in ZORRO.items():  # odd lines bad, even lines good
        (folder / f"{paradigm}.txt").write_text("".join(f"{bad}\n{good}\n" for bad, good in pairs))
    return folder


def test_neutral_pairs_equal_the_zorro_folder_frame_and_records(tmp_path):
    folder = write_zorro(tmp_path / "zorro")
    zorro = read_pairs(folder)
    path = write_pairs_jsonl(zorro, tmp_path / "pairs.jsonl")
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # atomic: no temporary left
    first = json.loads(path.read_text().split("\n")[0])
    assert first == {"good": "The dog near the trees barks.", "bad": "The dog near the trees bark.",
                     "group": "agreement_subject_verb-across_prepositional_phrase", "field": "agreement_subject_verb"}
    pd.testing.assert_frame_equal(read_pairs(path), zorro)
    chosen = ["binding-principle_a"]
    pd.testing.assert_frame_equal(read_pairs(path, chosen, limit=2), read_pairs(folder, chosen, limit=2))
    tok = gpt2_bpe()
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_layer=1, n_embd=32, n_head=2, n_positions=64,
                                       initializer_range=0.5)).eval()
    from_folder = measure(model, [read_probe_set("z", "pairs", folder, tok)])
    from_file = measure(model, [read_probe_set("z", "pairs", path, tok)])
    assert from_file == from_folder and "z.field.binding.accuracy" in from_file
    # the field is optional: the group's name before its first '-'
    (tmp_path / "nofield.jsonl").write_text('{"good": "a b.", "bad": "b a.", "group": "order-two"}\n')
    assert read_neutral_pairs(tmp_path / "nofield.jsonl")["field"].tolist() == ["order"]


def test_the_shared_zorro_round_trips():
    folder = SHARED_DATA / "zorro"
    if not folder.is_dir():
        pytest.skip(f"shared data absent: {folder}")
    import tempfile

    zorro = read_pairs(folder, limit=20)
    with tempfile.TemporaryDirectory() as tmp:
        pd.testing.assert_frame_equal(read_pairs(write_pairs_jsonl(zorro, Path(tmp) / "zorro.jsonl")), zorro)


def test_bad_neutral_pairs_are_one_line_each(tmp_path):
    path = tmp_path / "pairs.jsonl"
    path.write_text('{"good": "a.", "bad": "b.", "group": "g"}\n\n{"good": "a.", "group": "g"}\n')
    assert one_line(read_pairs, path) == f"{path}: line 3: missing key 'bad'"
    path.write_text('{"good": "a.", "bad": "b.", "group": 3}\n')
    assert "line 1: key 'group' must be str, got int" in one_line(read_pairs, path)
    path.write_text('{"good": "a.", "bad": "b.", "group": "g", "field": null}\n')
    assert "line 1: key 'field' must be str" in one_line(read_pairs, path)
    path.write_text('{"good": "a.", "bad": "b.", "group": "g"}\n')
    assert "no group 'h'" in one_line(read_pairs, path, ["h"])
    path.write_text("\n")
    assert "no minimal pairs" in one_line(read_pairs, path)
    other = tmp_path / "pairs.txt"
    other.write_text("x\n")
    assert ".jsonl file" in one_line(read_pairs, other)
    assert "lack column(s) paradigm" in one_line(write_pairs_jsonl, pd.DataFrame({"field": []}), tmp_path / "x.jsonl")
