"""Task loaders of the lm lab: single-token answer prediction and plain sentences.

An :class:`Example` asks the model for ONE token after its prompt: the loss is the
cross-entropy of the logits at the prompt's last token against the first (and only) token
of ``answer`` (answers carry their leading space, GPT-2 style). Its ``group`` names the set
of same-kind answers used by the "type-correct" category (spec section 3).

=============  ==========================================  ====================  ==================
task           prompt                                      answer                group
=============  ==========================================  ====================  ==================
counterfact    rewrite prompt with the subject, then its   " " + target_true     relation_id
               2 paraphrase prompts (3 per record)
hotpotqa       the question, verbatim (:data:`HOTPOTQA_    " " + answer          :func:`answer_kind`
               FRAME`)
blimp          :data:`BLIMP_FRAME` of sentence_good, then  " good" / " bad"      "acceptability"
               of sentence_bad (2 per pair)
sick           :data:`SICK_FRAME` of sentence_A and _B     :data:`SICK_ANSWERS`  "entailment-label"
=============  ==========================================  ====================  ==================

Ids carry the task: ``counterfact/<case_id>/<k>`` (k = 0 rewrite, 1-2 paraphrases),
``hotpotqa/<_id>``, ``blimp/<paradigm>/<pairID>/good|bad``, ``sick/<pair_ID>``. ``limit``
counts records (CounterFact records, HotpotQA questions, SICK pairs of the split, BLiMP pairs
PER PARADIGM), in file order. Local files are read by :mod:`stagewise.lmkit.readers`; with
no path the data come from the Hugging Face hub (:data:`HUB_SOURCES`).
"""

from __future__ import annotations

import difflib
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import zip_longest
from pathlib import Path
from typing import Any, TypeVar, cast

from stagewise.errors import UserError
from stagewise.lmkit import readers
from stagewise.lmkit.blimp import read_blimp_pairs
from stagewise.lmkit.readers import Located, get_key

TASKS = ("counterfact", "hotpotqa", "blimp", "sick")
"""Tasks of :func:`load_examples`."""

SENTENCE_TASKS = ("blimp", "sick")
"""Tasks of :func:`load_sentences` (the plain next-token LM framing)."""

DEFAULT_FILES = {"counterfact": "counterfact/counterfact_500.json", "hotpotqa": "hotpotqa/hotpotqa_dev_500.jsonl",
                 "blimp": "blimp", "sick": "sick/SICK.txt"}
"""Where each task lives under the shared-data root (:func:`default_path`)."""

HUB_SOURCES = {
    "counterfact": ("azhx/counterfact", None, "train+test"),  # ROME's 21,919 records (19,728 + 2,191)
    "hotpotqa": ("hotpotqa/hotpot_qa", "distractor", "validation"),
    "blimp": ("nyu-mll/blimp", "<paradigm>", "train"),  # one config per paradigm
    "sick": ("RobZamp/sick", None, "<split>"),  # train / validation / test = TRAIN / TRIAL / TEST
}
"""``(dataset id, config, split)`` given to ``datasets.load_dataset`` when no path is set."""

HOTPOTQA_FRAME = "{question}"
"""HotpotQA prompt: the question as is (the authors' "question as prompt")."""

BLIMP_FRAME = "{sentence} Is this sentence good or bad? Answer:"
"""BLiMP acceptability prompt; the answer is :data:`BLIMP_ANSWERS`."""

BLIMP_ANSWERS = {"good": " good", "bad": " bad"}
"""Answer of the acceptable (sentence_good) and unacceptable (sentence_bad) sentence."""

SICK_FRAME = "Premise: {premise} Hypothesis: {hypothesis} Relation:"
"""SICK entailment prompt (premise = sentence_A, hypothesis = sentence_B)."""

SICK_ANSWERS = {"ENTAILMENT": " entailment", "NEUTRAL": " neutral", "CONTRADICTION": " contradiction"}
"""Answer of each SICK label: the lower-cased label word (" entailment" is 2 GPT-2 tokens)."""

SICK_ANSWERS_YES_MAYBE_NO = {"ENTAILMENT": " yes", "NEUTRAL": " maybe", "CONTRADICTION": " no"}
"""The usual one-token NLI verbalizer, for tokenizers that split the label words."""

SICK_SPLITS = ("TRAIN", "TRIAL", "TEST", "all")
"""Values of ``split`` (case-insensitive): the SemEval_set column, or every pair."""

_HUB_SICK_SPLITS = {"TRAIN": "train", "TRIAL": "validation", "TEST": "test", "all": "train+validation+test"}


@dataclass(frozen=True)
class Example:
    """One single-token answer prediction: the model must predict ``answer``'s one token
    after ``prompt``; ``group`` names the answers of the same kind."""

    id: str
    task: str
    prompt: str
    answer: str
    group: str
    original_answer: str | None = None  # the data's answer where a control replaced it (controls.frequency_matched)


@dataclass(frozen=True)
class Sentence:
    """One text for the plain next-token LM framing."""

    id: str
    task: str
    text: str


# --- answer kinds (HotpotQA groups) ---------------------------------------------------------

_MONTH = (r"(?:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?"
          r"|sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)\.?")
_DAY = r"(?:0?[1-9]|[12]\d|3[01])(?:st|nd|rd|th)?"
_DATE = re.compile("|".join((
    r"1\d{3}|20\d{2}|2100",  # a year 1000-2100 alone
    rf"{_MONTH}(?:,? \d{{3,4}})?",  # June / June 1990 / June, 1990
    rf"(?:the )?{_DAY} (?:of )?{_MONTH}(?:,? \d{{3,4}})?",  # 26 June (2013) / the 4th of July
    rf"{_MONTH} {_DAY}(?:,? \d{{3,4}})?",  # October 17(, 1938)
    r"\d{4}-\d{1,2}-\d{1,2}|\d{1,2}/\d{1,2}/\d{2,4}",  # 1990-06-26 / 26/06/1990
)), re.IGNORECASE)
_NUMBER = re.compile(r"[+-]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|[+-]?\.\d+")


def answer_kind(answer: str) -> str:
    """``"yes/no" | "date" | "number" | "other"``: the kind of a HotpotQA answer.

    The whole answer (spaces trimmed and collapsed, one final "." dropped) must be: yes/no:
    "yes" or "no" (any case); date (tested before number): a year 1000-2100 alone, a month
    name (or abbreviation) alone or with a day and/or a year ("June 1990", "26 June 2013",
    "October 17, 1938", "the 4th of July"), or ISO / slashed digits ("1990-06-26",
    "26/06/1990"); number: a plain numeral with optional sign, thousands commas and decimals
    ("1,000", "3.5", "-2"), no units or words ("70 years", "100th", "three" are other).
    """
    text = " ".join(answer.split())
    text = text[:-1].rstrip() if text.endswith(".") and not _DATE.fullmatch(text) else text
    if text.lower() in ("yes", "no"):
        return "yes/no"
    if _DATE.fullmatch(text):
        return "date"
    if _NUMBER.fullmatch(text):
        return "number"
    return "other"


# --- builders from located records (files and hub rows alike) -------------------------------

def _check_limit(limit: int | None) -> None:
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise UserError(f"limit={limit!r}: must be a whole number >= 0 (or None for every record)")


def _nonempty(items: list, source: object, what: str, limit: int | None) -> list:
    if not items:
        why = "limit=0" if limit == 0 else "none found"
        raise UserError(f"{source}: no {what} ({why})")
    return items


def _unique_ids(items: Sequence[Example | Sentence], wheres: Sequence[str], source: object) -> None:
    """One-line UserError naming the first id given twice (and both records)."""
    seen: dict[str, str] = {}
    for item, where in zip(items, wheres):
        if item.id in seen:
            raise UserError(f"{source}: {where}: id '{item.id}' already given by {seen[item.id]}")
        seen[item.id] = where


COUNTERFACT_PROMPTS = {"all": (0, 1, 2), "rewrite": (0,), "paraphrase": (1, 2)}
"""``task.prompts`` -> which of a record's prompts are examples (0: the rewrite template with the
subject, 1-2: the paraphrases); ids keep the prompt's index either way."""


def _counterfact(records: list[Located], source: object, prompts: str = "all", subject_repeat: int = 1,
                 suffix: str = "") -> list[Example]:
    """3 Examples per record (or the ``prompts`` variant's share of them); with ``subject_repeat`` k
    each prompt starts with "SUBJECT. " k - 1 times (the mechanism test's easier facts); ``suffix``
    ends every prompt (the moved cue)."""
    out, wheres = [], []
    keep = COUNTERFACT_PROMPTS[prompts]
    for where, rec in records:
        case = get_key(rec, "case_id", (int, str), source, where)
        template = get_key(rec, "requested_rewrite.prompt", str, source, where)
        subject = get_key(rec, "requested_rewrite.subject", str, source, where)
        target = get_key(rec, "requested_rewrite.target_true.str", str, source, where)
        relation = get_key(rec, "requested_rewrite.relation_id", str, source, where)
        paraphrases = get_key(rec, "paraphrase_prompts", list, source, where)
        if template.count("{}") != 1:
            raise UserError(f"{source}: {where} (case_id {case}): requested_rewrite.prompt must hold '{{}}' "
                            f"once (the subject), got {template!r}")
        if len(paraphrases) < 2 or not all(isinstance(p, str) for p in paraphrases[:2]):
            raise UserError(f"{source}: {where} (case_id {case}): paraphrase_prompts must start with 2 strings, "
                            f"got {paraphrases[:2]!r}")
        texts = [template.replace("{}", subject), *paraphrases[:2]]
        prefix = f"{subject}. " * (subject_repeat - 1)
        out += [Example(f"counterfact/{case}/{k}", "counterfact", prefix + texts[k] + suffix, " " + target, relation)
                for k in keep]
        wheres += [where] * len(keep)
    _unique_ids(out, wheres, source)
    return out


def _hotpotqa(records: list[Located], source: object) -> list[Example]:
    out, wheres = [], []
    for where, rec in records:
        key = "id" if isinstance(rec, dict) and "_id" not in rec and "id" in rec else "_id"  # file: _id, hub: id
        qid = get_key(rec, key, str, source, where)
        question = get_key(rec, "question", str, source, where)
        answer = get_key(rec, "answer", str, source, where)
        out.append(Example(f"hotpotqa/{qid}", "hotpotqa", HOTPOTQA_FRAME.format(question=question),
                           " " + answer, answer_kind(answer)))
        wheres.append(where)
    _unique_ids(out, wheres, source)
    return out


def _sick_rows(records: list[Located], source: object, split: str, limit: int | None) -> list[tuple[str, dict]]:
    """``(where, row)`` of the split's pairs, checked, the first ``limit`` only."""
    out: list[tuple[str, dict]] = []
    for where, rec in records[:0] if limit == 0 else records:
        row = {k: get_key(rec, k, str, source, where) for k in readers.SICK_COLUMNS}
        label, semeval = row["entailment_label"].strip().upper(), row["SemEval_set"].strip()
        if label not in SICK_ANSWERS:
            raise UserError(f"{source}: {where}: entailment_label '{label}' is not one of {', '.join(SICK_ANSWERS)}")
        if semeval not in SICK_SPLITS[:3]:
            raise UserError(f"{source}: {where}: SemEval_set '{semeval}' is not one of {', '.join(SICK_SPLITS[:3])}")
        if split == "all" or semeval == split:
            out.append((where, {**row, "entailment_label": label}))
            if limit is not None and len(out) >= limit:
                break
    return out


def _sick_split(split: str) -> str:
    value = str(split)
    value = "all" if value.lower() == "all" else value.upper()
    if value not in SICK_SPLITS:
        raise UserError(f"split={split!r}: unknown SICK split; allowed: {', '.join(SICK_SPLITS)}")
    return value


# --- local files ----------------------------------------------------------------------------

def counterfact_examples(path: Path, *, limit: int | None = None, prompts: str = "all",
                         subject_repeat: int = 1, suffix: str = "") -> list[Example]:
    """3 Examples per record of a CounterFact JSON list (ROME schema), first ``limit`` records;
    ``prompts`` and ``subject_repeat``: the prompt variants of :func:`_counterfact`."""
    _check_limit(limit)
    path = Path(path)
    return _nonempty(_counterfact(readers.read_json(path)[:limit], path, prompts, subject_repeat, suffix), path,
                     "CounterFact records", limit)


def hotpotqa_examples(path: Path, *, limit: int | None = None) -> list[Example]:
    """One Example per question of a HotpotQA file (JSON lines or a JSON list, distractor schema)."""
    _check_limit(limit)
    path = Path(path)
    return _nonempty(_hotpotqa(readers.read_json_or_jsonl(path, limit), path), path, "HotpotQA questions", limit)


def _blimp_pairs(folder: Path, paradigms: Iterable[str] | str | None, limit: int | None) -> list[dict[str, str]]:
    """The pairs of a local BLiMP folder through the one reader of the lab (:func:`blimp.read_blimp_pairs`)."""
    readers.check_folder(folder)
    names = [paradigms] if isinstance(paradigms, str) else (list(dict.fromkeys(paradigms)) if paradigms is not None else None)
    frame = read_blimp_pairs(folder, names, limit)
    frame = frame.assign(pair_id=frame["pair_id"].astype(str))
    pairs = frame[["paradigm", "pair_id", "field", "sentence_good", "sentence_bad"]].to_dict(orient="records")
    return _nonempty(pairs, folder, "BLiMP pairs", limit)


def _blimp_examples(pairs: list[dict[str, str]]) -> list[Example]:
    return [Example(f"blimp/{p['paradigm']}/{p['pair_id']}/{kind}", "blimp",
                    BLIMP_FRAME.format(sentence=p[f"sentence_{kind}"]), BLIMP_ANSWERS[kind], "acceptability")
            for p in pairs for kind in ("good", "bad")]


def _blimp_sentences(pairs: list[dict[str, str]]) -> list[Sentence]:
    return [Sentence(f"blimp/{p['paradigm']}/{p['pair_id']}", "blimp", p["sentence_good"]) for p in pairs]


def blimp_examples(folder: Path, *, paradigms: Iterable[str] | None = None, limit: int | None = None) -> list[Example]:
    """2 Examples (good, then bad) per minimal pair of a folder of BLiMP paradigm JSONL files;
    paradigms in the order given (default: sorted file names), ``limit`` pairs per paradigm."""
    _check_limit(limit)
    return _blimp_examples(_blimp_pairs(Path(folder), paradigms, limit))


def blimp_sentences(folder: Path, *, paradigms: Iterable[str] | None = None, limit: int | None = None) -> list[Sentence]:
    """The good sentence of every BLiMP pair (id ``blimp/<paradigm>/<pairID>``)."""
    _check_limit(limit)
    return _blimp_sentences(_blimp_pairs(Path(folder), paradigms, limit))


def _sick_examples(rows: list[tuple[str, dict]], source: object, answers: Mapping[str, str]) -> list[Example]:
    out = [Example(f"sick/{r['pair_ID'].strip()}", "sick", SICK_FRAME.format(premise=r["sentence_A"], hypothesis=r["sentence_B"]),
                   answers[r["entailment_label"]], "entailment-label") for _, r in rows]
    _unique_ids(out, [w for w, _ in rows], source)
    return out


def _sick_sentences(rows: list[tuple[str, dict]]) -> list[Sentence]:
    first: dict[str, str] = {}  # sentence -> id of its first occurrence
    for _, r in rows:
        for side in ("A", "B"):
            first.setdefault(r[f"sentence_{side}"], f"sick/{r['pair_ID'].strip()}/{side}")
    return [Sentence(i, "sick", text) for text, i in first.items()]


def _answer_words(answers: Mapping[str, str] | None) -> Mapping[str, str]:
    words = SICK_ANSWERS if answers is None else answers
    if set(words) != set(SICK_ANSWERS) or not all(isinstance(w, str) and w for w in words.values()):
        raise UserError(f"SICK answers={dict(words)!r}: give one non-empty word for each of {', '.join(SICK_ANSWERS)}")
    return words


def sick_examples(path: Path, *, split: str = "TRAIN", limit: int | None = None,
                  answers: Mapping[str, str] | None = None) -> list[Example]:
    """One Example per pair of the SICK split (tab-separated SICK.txt), first ``limit`` pairs;
    ``answers`` maps each label to its answer word (default :data:`SICK_ANSWERS`)."""
    _check_limit(limit)
    split, words, path = _sick_split(split), _answer_words(answers), Path(path)
    rows = _nonempty(_sick_rows(readers.read_sick(path), path, split, limit), path, f"SICK pairs in split {split}", limit)
    return _sick_examples(rows, path, words)


def sick_sentences(path: Path, *, split: str = "TRAIN", limit: int | None = None) -> list[Sentence]:
    """The unique sentence_A / sentence_B texts of the split's first ``limit`` pairs, first
    seen first (id ``sick/<pair_ID>/A|B`` of the first occurrence)."""
    _check_limit(limit)
    split, path = _sick_split(split), Path(path)
    rows = _nonempty(_sick_rows(readers.read_sick(path), path, split, limit), path, f"SICK pairs in split {split}", limit)
    return _sick_sentences(rows)


# --- Hugging Face hub -----------------------------------------------------------------------

def _hub_blimp(paradigms: Iterable[str] | str | None, limit: int | None) -> list[dict[str, str]]:
    name, _, split = HUB_SOURCES["blimp"]
    known = readers.hub_config_names("blimp", name)
    pairs = []
    for paradigm in readers.paradigm_names(paradigms, known, f"hub dataset {name}"):
        label, rows = readers.hub_rows("blimp", name, paradigm, split, limit)
        pairs += [readers.blimp_pair(paradigm, row, label, where) for where, row in rows]
    return _nonempty(pairs, f"hub dataset {name}", "BLiMP pairs", limit)


def _hub_sick(split: str, limit: int | None) -> tuple[str, list[tuple[str, dict]]]:
    """SICK rows from the hub in the file schema (label ids -> names, SemEval_set from the split)."""
    name, config, _ = HUB_SOURCES["sick"]
    names = list(SICK_ANSWERS)  # the hub's ClassLabel order: entailment, neutral, contradiction
    parts: list[tuple[str, dict]] = []
    for semeval in (SICK_SPLITS[:3] if split == "all" else (split,)):
        label, rows = readers.hub_rows("sick", name, config, _HUB_SICK_SPLITS[semeval], limit)
        for where, row in rows:
            lab = get_key(row, "label", (int, str), label, where)
            parts.append((f"split {_HUB_SICK_SPLITS[semeval]} {where}", {
                "pair_ID": str(row.get("pair_ID", row.get("id", ""))), "sentence_A": row.get("sentence_A"),
                "sentence_B": row.get("sentence_B"), "SemEval_set": semeval,
                "entailment_label": names[lab] if isinstance(lab, int) and 0 <= lab < 3 else str(lab)}))
    source = f"hub dataset {name}"
    return source, _nonempty(_sick_rows(parts, source, split, limit), source, f"SICK pairs in split {split}", limit)


# --- dispatch -------------------------------------------------------------------------------

def _task(task: str, allowed: Sequence[str]) -> str:
    if task not in allowed:
        close = difflib.get_close_matches(str(task), allowed, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise UserError(f"task={task!r}: unknown{hint}; allowed: {', '.join(allowed)}")
    return task


def default_path(task: str, root: Path) -> Path:
    """Where ``task`` lives under a shared-data root (:data:`DEFAULT_FILES`)."""
    return Path(root) / DEFAULT_FILES[_task(task, TASKS)]


def load_examples(task: str, path: Path | None, *, limit: int | None = None,
                  paradigms: Iterable[str] | None = None, split: str = "TRAIN",
                  answers: Mapping[str, str] | None = None, prompts: str = "all",
                  subject_repeat: int = 1, suffix: str = "") -> list[Example]:
    """The Examples of ``task`` from a local file / folder, or from the hub when ``path`` is
    None. ``paradigms`` is for blimp only (an error elsewhere); ``split`` and ``answers``
    (label -> answer word, default :data:`SICK_ANSWERS`) are used by sick only; ``prompts`` and
    ``subject_repeat`` and ``suffix`` (counterfact's prompt variants) by counterfact only."""
    _task(task, TASKS)
    _check_limit(limit)
    if paradigms is not None and task != "blimp":
        raise UserError(f"paradigms={paradigms!r}: only task=blimp has paradigms (task={task})")
    if path is not None:
        if task == "counterfact":
            return counterfact_examples(path, limit=limit, prompts=prompts, subject_repeat=subject_repeat, suffix=suffix)
        if task == "hotpotqa":
            return hotpotqa_examples(path, limit=limit)
        if task == "blimp":
            return blimp_examples(path, paradigms=paradigms, limit=limit)
        return sick_examples(path, split=split, limit=limit, answers=answers)
    if task == "blimp":
        return _blimp_examples(_hub_blimp(paradigms, limit))
    if task == "sick":
        source, rows = _hub_sick(_sick_split(split), limit)
        return _sick_examples(rows, source, _answer_words(answers))
    name, config, hub_split = HUB_SOURCES[task]
    source, rows = readers.hub_rows(task, name, config, hub_split, limit)
    built = (_counterfact(rows, source, prompts, subject_repeat, suffix) if task == "counterfact"
             else _hotpotqa(rows, source))
    return _nonempty(built, source, "records", limit)


def load_sentences(task: str, path: Path | None, *, limit: int | None = None,
                   paradigms: Iterable[str] | None = None, split: str = "TRAIN") -> list[Sentence]:
    """The Sentences of ``task`` (blimp: good sentences; sick: unique sentences of the split)."""
    _task(task, SENTENCE_TASKS)
    _check_limit(limit)
    if paradigms is not None and task != "blimp":
        raise UserError(f"paradigms={paradigms!r}: only task=blimp has paradigms (task={task})")
    if task == "blimp":
        if path is not None:
            return blimp_sentences(path, paradigms=paradigms, limit=limit)
        return _blimp_sentences(_hub_blimp(paradigms, limit))
    if path is not None:
        return sick_sentences(path, split=split, limit=limit)
    return _sick_sentences(_hub_sick(_sick_split(split), limit)[1])


# --- mixtures and the single-token filter ---------------------------------------------------

Item = TypeVar("Item", Example, Sentence)
_GAP = object()


def mixture(parts: Mapping[str, Sequence[Item]]) -> list[Item]:
    """Round-robin interleaving of the parts in dataset order (part order = mapping order):
    ``a0, b0, a1, b1, ...``; once a part runs out the others continue. Examples or Sentences;
    ids are kept as they are (they carry the task) and must be unique across parts."""
    if not parts:
        raise UserError("mixture: no parts given")
    empty = [name for name, items in parts.items() if not items]
    if empty:
        raise UserError(f"mixture: part(s) {', '.join(empty)} have no items")
    # every entry but the _GAP fill is an item of a part
    mixed = cast(list[Item], [x for row in zip_longest(*parts.values(), fillvalue=_GAP) for x in row if x is not _GAP])
    counts = Counter(x.id for x in mixed)
    twice = [i for i, n in counts.items() if n > 1]
    if twice:
        raise UserError(f"mixture: id '{twice[0]}' occurs {counts[twice[0]]} times ({len(twice)} duplicated ids)")
    return mixed


def single_token_answers(examples: Sequence[Example], tokenizer: Any) -> tuple[list[Example], dict[str, int]]:
    """The examples whose answer is exactly one token of ``tokenizer`` (no special tokens),
    and the number dropped per task (every task present, 0 included). The distinct answers
    are tokenized in one batched call."""
    if not examples:
        return [], {}
    answers = list(dict.fromkeys(e.answer for e in examples))
    ids = tokenizer(answers, add_special_tokens=False)["input_ids"]  # one list of ids per answer
    single = {a for a, tokens in zip(answers, ids) if len(tokens) == 1}
    kept = [e for e in examples if e.answer in single]
    dropped = Counter(e.task for e in examples if e.answer not in single)
    return kept, {task: dropped[task] for task in dict.fromkeys(e.task for e in examples)}
