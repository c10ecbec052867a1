"""BLiMP minimal-pair evaluation (Warstadt et al. 2020) of any causal LM.

A pair is correct when the model gives the grammatical sentence the higher total
log-probability (:func:`stagewise.lmkit.scoring.sequence_logprobs`)::

    correct = log P(delimiter + sentence_good) >= log P(delimiter + sentence_bad)

each scored after the BOS (else EOS) token. ``delimiter`` defaults to lm-evaluation-harness's
``target_delimiter`` (" "): its blimp task has ``doc_to_text: ""`` and ``doc_to_choice:
"{{[sentence_good, sentence_bad]}}"``, and ``ConfigurableTask.construct_requests`` builds
``(ctx, f"{target_delimiter}{cont}")``, so lm_eval scores ``" " + sentence`` after the
prefix token. With the default our log-likelihoods are lm_eval's (tests check it to 1e-4);
``delimiter=""`` scores the bare sentences. A tie (equal totals) counts as right, as in
lm_eval, whose ``argmax`` over [good, bad] picks the first of equal log-likelihoods, the good
sentence. Ties are rare for a model that reads the sentences, so many of them mean it does not
(a tokenizer that maps the differing words alike, e.g. a compact-vocabulary export without
them): ``BlimpResult.n_ties`` counts them, ``eval blimp`` prints them beside the accuracy and
warns above :data:`TIE_WARN_FRACTION` of the pairs.

Aggregates (:class:`BlimpResult`): ``accuracy`` is the micro mean over pairs, ``macro_accuracy``
the mean of the per-paradigm accuracies (lm_eval's "blimp" group score: ``aggregation: mean,
weight_by_size: False``). Per field, ``accuracy`` is the mean over the field's pairs and
``macro_accuracy`` the mean over its paradigms. With the full data (1000 pairs in every
paradigm) micro and macro agree.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from stagewise.errors import UserError
from stagewise.lmkit.readers import read_text
from stagewise.lmkit.scoring import sequence_logprobs
from stagewise.runs.store import atomic_write_json, atomic_write_text, safe_csv, write_parquet

FIELDS = ("morphology", "syntax", "syntax_semantics", "semantics")
FIELD_ALIASES = {"syntax/semantics": "syntax_semantics"}  # principle_A_case_2 spells it so
REQUIRED_KEYS = ("sentence_good", "sentence_bad", "field", "linguistics_term", "UID", "pairID")
PAIR_COLUMNS = ("paradigm", "pair_id", "field", "linguistics_term", "sentence_good", "sentence_bad")
SCORED_COLUMNS = ("paradigm", "pair_id", "field", "ll_good", "ll_bad", "correct")
LM_EVAL_DELIMITER = " "
TIE_WARN_FRACTION = 0.01
"""``eval blimp`` warns when more than this fraction of the pairs tie (module doc)."""
"""lm_eval's default ``target_delimiter``, put before every choice of a multiple_choice task."""


@dataclass(frozen=True, eq=False)
class BlimpResult:
    """BLiMP accuracies of one scored set of pairs.

    Attributes:
        accuracy: mean pair correctness over all pairs (micro).
        macro_accuracy: mean of the per-paradigm accuracies (lm_eval's group score).
        n_pairs: number of pairs.
        n_paradigms: number of paradigms.
        n_ties: pairs with ``ll_good == ll_bad`` (counted right, lm_eval's rule: module doc).
        paradigms: one row per paradigm (sorted): paradigm, field, n, accuracy.
        fields: one row per field present, in :data:`FIELDS` order: field, n_paradigms,
            n_pairs, accuracy (mean over the field's pairs), macro_accuracy (mean over its
            paradigms).
    """

    accuracy: float
    macro_accuracy: float
    n_pairs: int
    n_paradigms: int
    n_ties: int
    paradigms: pd.DataFrame
    fields: pd.DataFrame

    @property
    def tie_fraction(self) -> float:
        return self.n_ties / self.n_pairs if self.n_pairs else 0.0

    def tie_warning(self) -> str | None:
        """One line when more than :data:`TIE_WARN_FRACTION` of the pairs tie, else None."""
        if self.tie_fraction <= TIE_WARN_FRACTION:
            return None
        return (f"{self.n_ties} of {self.n_pairs} pairs ({self.tie_fraction:.1%}) tie (equal log-probabilities), above "
                f"{TIE_WARN_FRACTION:.0%}; a tie counts as right (lm_eval's rule), so the accuracy is not the model's: "
                "its tokenizer gives the two sentences of those pairs the same tokens (e.g. a compact-vocabulary export "
                "without their words)")

    def summary(self) -> dict:
        """JSON-ready summary (no per-paradigm rows)."""
        return {"accuracy": self.accuracy, "macro_accuracy": self.macro_accuracy, "n_pairs": self.n_pairs,
                "n_paradigms": self.n_paradigms, "n_ties": self.n_ties,
                "fields": self.fields.to_dict(orient="records")}


# ------------------------------------------------------------------------------ reading
def read_blimp_pairs(folder: Path, paradigms: Sequence[str] | None = None, limit: int | None = None) -> pd.DataFrame:
    """Minimal pairs from a folder of BLiMP ``<paradigm>.jsonl`` files.

    Args:
        folder: the folder (e.g. ``../shared/data/blimp``).
        paradigms: file stems to read, in this order (default: all, sorted).
        limit: at most this many pairs per paradigm (the first ones of each file).

    Returns:
        DataFrame with :data:`PAIR_COLUMNS`: paradigm (file stem, == UID), pair_id (int64,
        from pairID), field (one of :data:`FIELDS`), linguistics_term, sentence_good,
        sentence_bad; file order within a paradigm.

    Raises:
        UserError: missing folder, unknown paradigm, malformed line, missing or bad key,
            bad limit, or nothing selected.

    Example::

        pairs = read_blimp_pairs(Path("blimp"), ["anaphor_gender_agreement"], limit=100)
        pairs.columns                               # paradigm, pair_id, field, linguistics_term, sentence_good, sentence_bad
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise UserError(f"BLiMP folder {folder} does not exist (expected a folder of <paradigm>.jsonl files)")
    available = sorted(p.stem for p in folder.glob("*.jsonl"))
    if limit is not None and (not isinstance(limit, (int, np.integer)) or isinstance(limit, bool) or limit < 1):
        raise UserError(f"limit={limit!r} is not allowed: give a positive number of pairs per paradigm, or None")
    names = available if paradigms is None else list(dict.fromkeys(paradigms))
    unknown = [name for name in names if name not in available]
    if unknown:
        raise UserError(*(_unknown_message(name, available, folder) for name in unknown))
    rows: list[tuple] = []
    problems: list[str] = []
    for name in names:
        _read_file(folder / f"{name}.jsonl", limit, rows, problems)
    if problems:
        raise UserError(*problems)
    if not rows:
        raise UserError(f"no BLiMP pairs selected in {folder}: paradigms={list(names)!r} hold no pairs"
                        f" ({len(available)} .jsonl files there)")
    frame = pd.DataFrame(rows, columns=list(PAIR_COLUMNS))
    frame["pair_id"] = frame["pair_id"].astype(np.int64)
    return frame


def _unknown_message(name: str, available: list[str], folder: Path) -> str:
    close = difflib.get_close_matches(str(name), available, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return f"unknown BLiMP paradigm {name!r} ({hint}{len(available)} paradigms in {folder})"


def _read_file(path: Path, limit: int | None, rows: list[tuple], problems: list[str]) -> None:
    """Appends the pairs of one paradigm file to ``rows`` and its problems to ``problems``."""
    seen: set[int] = set()
    count = 0
    # the toolkit's one reader: size-bounded, and a non-UTF-8 byte is one line naming file, line and byte
    for number, line in enumerate(read_text(path).split("\n"), start=1):
        if limit is not None and count >= limit:
            break
        if not line.strip():
            continue
        where = f"{path.name} line {number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            problems.append(f"{where}: malformed JSON ({exc.msg} at column {exc.colno})")
            continue
        except RecursionError:
            problems.append(f"{where}: malformed JSON (nested too deeply)")
            continue
        if not isinstance(record, dict):
            problems.append(f"{where}: expected a JSON object, got {type(record).__name__}")
            continue
        missing = [key for key in REQUIRED_KEYS if key not in record]
        if missing:
            problems.append(f"{where}: missing key {missing[0]!r} (a BLiMP line needs {', '.join(REQUIRED_KEYS)})")
            continue
        row = _row(path.stem, record, where, problems)
        if row is None:
            continue
        if row[1] in seen:
            problems.append(f"{where}: duplicate pairID {row[1]} in paradigm {path.stem!r}")
            continue
        seen.add(row[1])
        rows.append(row)
        count += 1


def _row(paradigm: str, record: dict, where: str, problems: list[str]) -> tuple | None:
    """One validated row of :data:`PAIR_COLUMNS`, or None (problem recorded)."""
    field = FIELD_ALIASES.get(record["field"], record["field"])
    if field not in FIELDS:
        problems.append(f"{where}: field {record['field']!r} is not a BLiMP field (allowed: {', '.join(FIELDS)})")
        return None
    if record["UID"] != paradigm:
        problems.append(f"{where}: UID {record['UID']!r} does not match the file's paradigm {paradigm!r}")
        return None
    pair_id = record["pairID"]
    if isinstance(pair_id, bool) or not (isinstance(pair_id, int) or (isinstance(pair_id, str) and pair_id.isdigit())):
        problems.append(f"{where}: pairID {pair_id!r} is not a non-negative integer")
        return None
    for key in ("sentence_good", "sentence_bad", "linguistics_term"):
        if not isinstance(record[key], str) or not record[key].strip():
            problems.append(f"{where}: {key} {record[key]!r} is not a non-empty string")
            return None
    return paradigm, int(pair_id), field, record["linguistics_term"], record["sentence_good"], record["sentence_bad"]


# ------------------------------------------------------------------------------ scoring
def score_blimp(model, tokenizer, pairs: pd.DataFrame, *, delimiter: str = LM_EVAL_DELIMITER,
                **scorer_kwargs) -> pd.DataFrame:
    """``pairs`` plus ll_good, ll_bad (float64 total log-probabilities) and correct (bool).

    All 2N sentences go through one :func:`sequence_logprobs` call (so length sorting packs
    good and bad sentences together); ``scorer_kwargs`` are its keyword arguments
    (prefix_id, batch_tokens, device). ``delimiter`` is put before every sentence (module doc).

    Example::

        scored = score_blimp(model, tok, pairs, batch_tokens=4096)   # + ll_good, ll_bad, correct
    """
    missing = [c for c in ("sentence_good", "sentence_bad") if c not in pairs.columns]
    if missing:
        raise UserError(f"BLiMP pairs lack column {missing[0]!r} (read them with read_blimp_pairs)")
    texts = [delimiter + s for column in ("sentence_good", "sentence_bad") for s in pairs[column].tolist()]
    ll = sequence_logprobs(model, tokenizer, texts, **scorer_kwargs)  # (2N,) good then bad
    n = len(pairs)
    out = pairs.copy()
    out["ll_good"] = ll[:n]
    out["ll_bad"] = ll[n:]
    out["correct"] = out["ll_good"] >= out["ll_bad"]  # a tie counts as right (lm_eval's rule, module doc)
    return out


def blimp_accuracy(scored: pd.DataFrame) -> BlimpResult:
    """Overall, per-paradigm and per-field accuracy of :func:`score_blimp`'s output.

    Example::

        result = blimp_accuracy(score_blimp(model, tok, read_blimp_pairs(Path("blimp"))))
        result.accuracy, result.macro_accuracy, result.fields
    """
    missing = [c for c in SCORED_COLUMNS if c not in scored.columns]
    if missing:
        raise UserError(f"scored BLiMP pairs lack column {missing[0]!r} (score them with score_blimp)")
    if scored.empty:
        raise UserError("no scored BLiMP pairs to aggregate")
    fields_per_paradigm = scored.groupby("paradigm")["field"].nunique()
    mixed = fields_per_paradigm[fields_per_paradigm > 1]
    if len(mixed):
        raise UserError(f"paradigm {mixed.index[0]!r} has {int(mixed.iloc[0])} fields; each paradigm has one")
    correct = scored["correct"].astype(float)
    per_paradigm = (scored.assign(correct=correct).groupby("paradigm", sort=True)
                    .agg(field=("field", "first"), n=("correct", "size"), accuracy=("correct", "mean"))
                    .reset_index())
    per_paradigm["n"] = per_paradigm["n"].astype(np.int64)
    by_field = scored.assign(correct=correct).groupby("field")
    fields = pd.DataFrame({
        "n_paradigms": by_field["paradigm"].nunique(),
        "n_pairs": by_field["correct"].size(),
        "accuracy": by_field["correct"].mean(),
        "macro_accuracy": per_paradigm.groupby("field")["accuracy"].mean(),
    })
    order = [f for f in FIELDS if f in fields.index] + sorted(set(fields.index) - set(FIELDS))
    fields = fields.loc[order].rename_axis("field").reset_index()
    fields[["n_paradigms", "n_pairs"]] = fields[["n_paradigms", "n_pairs"]].astype(np.int64)
    return BlimpResult(
        accuracy=float(correct.mean()),
        macro_accuracy=float(per_paradigm["accuracy"].mean()),
        n_pairs=int(len(scored)),
        n_paradigms=int(len(per_paradigm)),
        n_ties=int((scored["ll_good"] == scored["ll_bad"]).sum()),
        paradigms=per_paradigm[["paradigm", "field", "n", "accuracy"]],
        fields=fields,
    )


def write_blimp(scored: pd.DataFrame, result: BlimpResult, out: Path) -> dict[str, Path]:
    """Writes (atomically) into ``out``: blimp.parquet (:data:`SCORED_COLUMNS`, one row per
    pair), blimp_summary.parquet (per paradigm), blimp_fields.csv (per field) and
    blimp_summary.json (:meth:`BlimpResult.summary`). Returns the paths by name.

    Example::

        paths = write_blimp(scored, blimp_accuracy(scored), Path("out"))
        paths["summary"]                            # Path("out/blimp_summary.json")
    """
    out = Path(out)
    paths = {"pairs": out / "blimp.parquet", "paradigms": out / "blimp_summary.parquet",
             "fields": out / "blimp_fields.csv", "summary": out / "blimp_summary.json"}
    write_parquet(scored[list(SCORED_COLUMNS)].reset_index(drop=True), paths["pairs"])
    write_parquet(result.paradigms, paths["paradigms"])
    atomic_write_text(paths["fields"], safe_csv(result.fields))
    atomic_write_json(paths["summary"], result.summary())
    return paths
