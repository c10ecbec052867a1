"""Bounded readers of local data files (the LM lab's tasks, BLiMP); every problem is one line of a
:class:`~stagewise.errors.UserError` naming the file and where in it.

Formats (the originals, unmodified):

* JSON: one document (CounterFact: a list of records). Errors: line and column.
* JSON lines: one record per line, blank lines skipped (HotpotQA, BLiMP). Errors: line.
* SICK: tab-separated with a header row, quoting off (a ``"`` is an ordinary character, as
  in ``csv.QUOTE_NONE``), CRLF or LF line ends. Errors: line and column count.

A record travels with its location, ``(where, record)`` with ``where`` e.g. ``"line 7"``
or ``"record [3]"`` (0-based list index), so schema errors downstream can name it.
Files larger than :data:`MAX_DATA_BYTES` are refused before they are read. The hub readers
(:func:`hub_rows`) turn any failure of ``datasets`` (offline, missing, script-only dataset)
into one line that says to pass a local path instead (:data:`LOCAL_DATA_HINT`); an
unreachable hub is that line at once, before ``datasets`` is asked (:func:`require_hub`).
"""

from __future__ import annotations

import codecs
import difflib
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from stagewise.errors import NotAvailable, UserError, readable_file
from stagewise.lmkit import hub

MAX_DATA_BYTES = 1 << 30
"""Largest data file read (1 GiB: the full HotpotQA train set is about 0.55 GB)."""

SICK_COLUMNS = ("pair_ID", "sentence_A", "sentence_B", "entailment_label", "SemEval_set")
"""Header columns the SICK reader needs (the file has 12)."""

BLIMP_FIELDS = ("morphology", "syntax", "syntax_semantics", "semantics")
"""BLiMP's linguistic fields after normalisation (``syntax/semantics`` -> ``syntax_semantics``)."""

LOCAL_DATA_HINT = ("give local data: export STAGEWISE_DATA=<folder in the shared-data layout: counterfact/, hotpotqa/, "
                   "blimp/, sick/> (or set data.root, data.path or data.paths.TASK in the run's config)")
"""What to do when data cannot be had: works for ``run`` and ``reproduce`` alike (reproduce's
--set takes executor.* only, so the hint names the environment variable first)."""

Located = tuple[str, Any]  # (where in the source, the parsed record)


def check_file(path: Path) -> int:
    """The size in bytes of a readable data file; one-line UserError otherwise.

    Example::

        check_file(Path("sick/SICK.txt"))           # its size in bytes; UserError when missing or over 1 GiB
    """
    return readable_file(path, MAX_DATA_BYTES, kind="a data file")


def check_folder(path: Path) -> None:
    """One-line UserError unless ``path`` is an existing folder.

    Example::

        check_folder(Path("blimp"))                 # UserError unless it is a folder
    """
    if path.is_file():
        raise UserError(f"{path}: is a file, expected a folder")
    if not path.is_dir():
        raise UserError(f"{path}: data folder not found")


def read_text(path: Path) -> str:
    """The UTF-8 text of a data file (BOM dropped); one-line UserError when unreadable.

    Example::

        text = read_text(Path("blimp/anaphor_gender_agreement.jsonl"))   # UserError naming line and byte if not UTF-8
    """
    check_file(path)
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise UserError(f"{path}: cannot be read ({err.strerror or err})") from None
    skip = len(codecs.BOM_UTF8) if raw.startswith(codecs.BOM_UTF8) else 0
    try:
        return raw[skip:].decode("utf-8")
    except UnicodeDecodeError as err:
        offset = skip + err.start  # in the file's bytes
        line = raw[:offset].count(b"\n") + 1
        raise UserError(f"{path}: line {line}: not UTF-8 text (byte 0x{raw[offset]:02x} at byte offset {offset}); "
                        "save the file as UTF-8") from None


def _json_list(path: Path, text: str) -> list[Located]:
    """The records of a JSON list document."""
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as err:
        raise UserError(f"{path}: not valid JSON: {err.msg} at line {err.lineno}, column {err.colno}") from None
    except RecursionError:
        raise UserError(f"{path}: not valid JSON: nested too deeply") from None
    if not isinstance(obj, list):
        raise UserError(f"{path}: expected a JSON list of records, got a JSON {type(obj).__name__}")
    return [(f"record [{i}]", rec) for i, rec in enumerate(obj)]


def _json_lines(path: Path, text: str, limit: int | None) -> list[Located]:
    """The records of a JSON-lines text, the first ``limit`` only (the rest is not parsed)."""
    out: list[Located] = []
    # split on "\n" only: JSON strings may hold a raw U+2028, which str.splitlines would cut
    for number, line in enumerate(text.split("\n"), start=1):
        if limit is not None and len(out) >= limit:
            break
        if not line.strip():
            continue
        try:
            out.append((f"line {number}", json.loads(line)))
        except json.JSONDecodeError as err:
            raise UserError(f"{path}: line {number}: not valid JSON: {err.msg} at column {err.colno}") from None
        except RecursionError:
            raise UserError(f"{path}: line {number}: not valid JSON: nested too deeply") from None
    return out


def read_json(path: Path) -> list[Located]:
    """Records of a JSON file holding one list of records.

    Example::

        read_json(Path("counterfact.json"))         # [("record [0]", {...}), ("record [1]", {...}), ...]
    """
    return _json_list(path, read_text(path))


def read_jsonl(path: Path, limit: int | None = None) -> list[Located]:
    """Records of a JSON-lines file (blank lines skipped), the first ``limit`` only.

    Example::

        read_jsonl(Path("hotpotqa.jsonl"), limit=2)   # [("line 1", {...}), ("line 2", {...})]
    """
    return _json_lines(path, read_text(path), limit)


def read_json_or_jsonl(path: Path, limit: int | None = None) -> list[Located]:
    """Records of a JSON list (the text starts with ``[``) or else of JSON lines.

    Example::

        read_json_or_jsonl(Path("hotpotqa.json"), limit=2)   # either format, the first 2 records
    """
    text = read_text(path)
    if text.lstrip()[:1] == "[":
        return _json_list(path, text)[:limit]
    return _json_lines(path, text, limit)


def get_key(record: Any, key: str, kind: type | tuple[type, ...], source: object, where: str) -> Any:
    """``record[k1][k2]...`` for a dotted ``key``, checked to be of ``kind`` (bool is never an
    int); one-line UserError naming the source, the record and the key otherwise.

    Example::

        get_key({"a": {"b": 1}}, "a.b", int, "data.json", "record [0]")   # 1
        get_key({"a": True}, "a", int, "data.json", "record [0]")   # UserError: ... must be int, got bool
    """
    value = record
    parts = key.split(".")
    for depth, part in enumerate(parts):
        if not isinstance(value, dict):
            at = ".".join(parts[:depth]) or "the record"
            raise UserError(f"{source}: {where}: {at} must be an object, got {type(value).__name__}")
        if part not in value:
            raise UserError(f"{source}: {where}: missing key '{key}'")
        value = value[part]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        wanted = " or ".join(k.__name__ for k in kinds)
        raise UserError(f"{source}: {where}: key '{key}' must be {wanted}, got {type(value).__name__}")
    return value


def blimp_pair(paradigm: str, record: Any, source: object, where: str) -> dict[str, str]:
    """One BLiMP pair ``{paradigm, pair_id, field, sentence_good, sentence_bad}`` of a raw
    record (file key ``pairID``, hub key ``pair_id``; field normalised).

    Example::

        blimp_pair("anaphor_gender_agreement", record, "a.jsonl", "line 1")
        # {"paradigm": "anaphor_gender_agreement", "pair_id": "0", "field": "morphology", "sentence_good": ..., ...}
    """
    id_key = "pair_id" if isinstance(record, dict) and "pairID" not in record and "pair_id" in record else "pairID"
    pair_id = get_key(record, id_key, (str, int), source, where)
    fld = get_key(record, "field", str, source, where).replace("/", "_")
    if fld not in BLIMP_FIELDS:
        raise UserError(f"{source}: {where}: field '{fld}' is not a BLiMP field; allowed: {', '.join(BLIMP_FIELDS)}")
    return {"paradigm": paradigm, "pair_id": str(pair_id), "field": fld,
            "sentence_good": get_key(record, "sentence_good", str, source, where),
            "sentence_bad": get_key(record, "sentence_bad", str, source, where)}


def paradigm_names(paradigms: Iterable[str] | str | None, known: Sequence[str], source: object) -> list[str]:
    """The selected paradigms (all when None), in the order given, duplicates dropped.

    Example::

        paradigm_names(["b", "b"], ["a", "b"], "blimp/")   # ["b"]
        paradigm_names(None, ["a", "b"], "blimp/")         # ["a", "b"]
    """
    if paradigms is None:
        return list(known)
    wanted = list(dict.fromkeys([paradigms] if isinstance(paradigms, str) else paradigms))
    if not wanted:
        raise UserError("paradigms=[]: name at least one BLiMP paradigm (or None for all)")
    unknown = [p for p in wanted if p not in known]
    if unknown:
        hints = []
        for name in unknown:
            close = difflib.get_close_matches(str(name), known, n=1, cutoff=0.6)
            hints.append(f"{name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
        raise UserError(f"{source}: unknown BLiMP paradigm(s) {', '.join(hints)}; {len(known)} paradigms are known")
    return wanted


def require_hub(task: str, label: str) -> None:
    """One-line UserError at once, without the libraries' retries, when the hub is unreachable
    (:func:`stagewise.lmkit.hub.hub_unreachable`) and ``datasets`` is not in its cache-only
    offline mode.

    Example::

        require_hub("blimp", "hub dataset nyu-mll/blimp")   # NotAvailable at once when the hub is unreachable
    """
    why = hub.hub_unreachable()
    if why is None or hub.datasets_offline():
        return
    cached = "" if hub.offline_by_environment() else "; with the dataset in your datasets cache, set HF_HUB_OFFLINE=1"
    raise NotAvailable(label, f"task {task}: no local data, and the Hugging Face hub is unreachable for {label} ({why}); "
                       f"{LOCAL_DATA_HINT}{cached}")


def hub_rows(task: str, name: str, config: str | None, split: str, limit: int | None) -> tuple[str, list[Located]]:
    """``(source label, located rows)`` of a hub dataset; one-line UserError when it fails.

    Example::

        label, rows = hub_rows("blimp", "nyu-mll/blimp", "anaphor_gender_agreement", "train", 10)
        rows[0]                                     # ("row 0", {"sentence_good": ..., ...})
    """
    label = f"hub dataset {name}" + (f" ({config})" if config else "") + f" split {split}"
    require_hub(task, label)
    try:
        import datasets

        table = datasets.load_dataset(name, config, split=split)
        if limit is not None:
            table = table.select(range(min(limit, len(table))))
        return label, [(f"row {i}", dict(row)) for i, row in enumerate(table)]
    except Exception as err:  # noqa: BLE001 (offline, missing, script-only, ...: all one message)
        raise UserError(hub_message(task, label, err)) from None


def hub_message(task: str, label: str, err: BaseException) -> str:
    """One line: the hub dataset could not be loaded (why, in short), and what to pass instead.

    Example::

        hub_message("sick", "hub dataset RobZamp/sick split train", OSError("offline"))   # one line, ends with LOCAL_DATA_HINT
    """
    detail = (str(err).strip().splitlines() or [""])[0][:160]
    return (f"task {task}: the dataset could not be loaded from the Hugging Face hub ({label}: "
            f"{type(err).__name__}{': ' + detail if detail else ''}); {LOCAL_DATA_HINT}")


def hub_config_names(task: str, name: str) -> list[str]:
    """The sorted config names of a hub dataset (BLiMP: its paradigms); one-line UserError when it fails.

    Example::

        hub_config_names("blimp", "nyu-mll/blimp")   # the 67 paradigms, sorted
    """
    require_hub(task, f"hub dataset {name}")
    try:
        import datasets

        return sorted(datasets.get_dataset_config_names(name))
    except Exception as err:  # noqa: BLE001
        raise UserError(hub_message(task, f"hub dataset {name}", err)) from None


def read_sick(path: Path) -> list[Located]:
    """Rows of SICK.txt as ``(where, {column: value})``, ``where`` = ``"line N"``; the header
    must name :data:`SICK_COLUMNS` and every row must have as many columns as the header.

    Example::

        read_sick(Path("sick/SICK.txt"))            # [("line 2", {"pair_ID": "1", "sentence_A": ..., ...}), ...]
    """
    lines = read_text(path).split("\n")
    header = lines[0].removesuffix("\r").split("\t")
    if not lines[0].strip():
        raise UserError(f"{path}: line 1: empty, expected a tab-separated header with {', '.join(SICK_COLUMNS)}")
    missing = [c for c in SICK_COLUMNS if c not in header]
    if missing:
        raise UserError(f"{path}: line 1: the header lacks column(s) {', '.join(missing)} "
                        f"(found {len(header)} columns: {', '.join(header[:12])})")
    out: list[Located] = []
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        row = line.removesuffix("\r").split("\t")  # quoting off: '"' is an ordinary character
        if len(row) != len(header):
            raise UserError(f"{path}: line {number}: {len(row)} tab-separated columns, expected {len(header)}")
        out.append((f"line {number}", dict(zip(header, row))))
    return out
