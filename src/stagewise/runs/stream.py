"""The metric stream ``metrics.jsonl``: append-only, one line per logged step, with a
running sha256 of its bytes so a checkpoint can name exactly the bytes it covers.

A checkpoint records ``cover()``: ``_lines`` (complete lines), ``_bytes`` (their length
B) and ``_sha256`` (the sha256 of bytes 0..B-1). On resume :func:`matches` tells whether
the file still starts with those bytes (one altered character anywhere in them fails),
and :meth:`MetricSink.truncate_bytes` cuts the stream back to exactly them. The running
hash costs one ``update`` per written line (no re-read at a checkpoint); after a cut it
is rebuilt from the kept bytes.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from ..errors import UserError, short_repr
from .atomic import atomic_write_bytes

NEWLINE = b"\n"
COVER_KEYS = ("_lines", "_bytes", "_sha256")  # what a checkpoint records of the stream it covers

FRAME_COLUMNS = ("step", "seed", "variant", "metric", "value")
"""The columns of the long-form metrics (:meth:`MetricSink.to_frame`, ``metrics.parquet``), in order."""

COLUMN_KINDS = {"step": "integers", "seed": "integers", "variant": "text", "metric": "text", "value": "numbers"}
"""What each column of the long-form metrics holds (what :func:`read_metrics_file` checks)."""

LINE_KEYS = "step, variant, names, f8"
"""The keys of a stream line, as a one-line error names them."""

INT64_MIN, INT64_MAX = -2**63, 2**63 - 1
"""The steps a stream line may carry (the Parquet column is int64)."""


def complete_prefix(blob: bytes) -> tuple[int, int]:
    """(lines, bytes) of the longest prefix of ``blob`` made of complete, parseable JSON
    lines (a torn last line from a kill, or a line that does not parse, ends it)."""
    count = pos = 0
    view = memoryview(blob)
    while True:
        end = blob.find(NEWLINE, pos)
        if end < 0:
            return count, pos
        try:
            json.loads(view[pos:end].tobytes())
        except (ValueError, RecursionError):  # JSONDecodeError and UnicodeDecodeError; a line nested too deeply
            return count, pos
        count, pos = count + 1, end + 1


def prefix_digest(blob: bytes, size: int) -> str:
    """sha256 (hex) of ``blob[:size]``, without copying it."""
    return hashlib.sha256(memoryview(blob)[:size]).hexdigest()


def matches(blob: bytes, cover: Mapping[str, Any]) -> bool:
    """True when ``blob`` (the stream's bytes) starts with the bytes ``cover`` (a checkpoint's
    ``_bytes`` and ``_sha256``) describes."""
    size = int(cover["_bytes"])
    return 0 <= size <= len(blob) and prefix_digest(blob, size) == cover["_sha256"]


class MetricSink:
    """Append-only JSONL stream of metrics, compacted to long-form Parquet at the end.

    One line per logged step and variant::

        {"step": t, "variant": "", "names": ["loss", ...], "f8": "<base64 of (K, S) float64>"}

    ``f8`` holds the values, metric-major, seeds in run order, as little-endian float64
    (exact, and ~100x cheaper to write than decimal text). Parquet columns: step (int64),
    seed (int64), variant (string), metric (string, ``{variant}/{name}`` when a variant is
    set), value (float64).

    Attributes:
        lines: complete lines written so far (or found on disk when opened).
        bytes: their length in bytes; the running sha256 covers exactly them.
    """

    def __init__(self, path: str | Path, seeds: Sequence[int], extra: Any = None):
        self.path = Path(path)
        self.seeds = list(seeds)
        self._handle = None
        self.extra = extra  # also gets every record, flush and close (stagewise.runs.sinks.SinkFanout), or None
        self._restart(self.read_bytes())

    def _restart(self, blob: bytes) -> None:
        """Running state (lines, bytes, sha256) of the complete, parseable prefix of ``blob``."""
        self.lines, self.bytes = complete_prefix(blob)
        self._sha = hashlib.sha256(memoryview(blob)[:self.bytes])

    def _open(self):
        if self._handle is None:
            self._handle = open(self.path, "ab")
        return self._handle

    @staticmethod
    def encode(step: int, names: Sequence[str], values: np.ndarray, variant: str = "") -> bytes:
        """The stream line of one step, newline included: ``values`` (K, S) little-endian float64."""
        line = json.dumps({"step": int(step), "variant": variant, "names": list(names),
                           "f8": base64.b64encode(values.tobytes()).decode("ascii")})
        return line.encode("ascii") + NEWLINE  # json.dumps escapes non-ASCII names

    def log_array(self, step: int, names: Sequence[str], values: np.ndarray, variant: str = "") -> None:
        """Append one step: ``values`` (K, S) float64 for the K ``names``."""
        values = np.ascontiguousarray(values, dtype="<f8")
        if values.shape != (len(names), len(self.seeds)):
            raise ValueError(f"metrics {list(names)[:3]}...: values of shape {values.shape}, "
                             f"expected ({len(names)}, {len(self.seeds)})")
        line = self.encode(step, names, values, variant)
        self._open().write(line)
        self._sha.update(line)
        self.lines += 1
        self.bytes += len(line)
        if self.extra is not None:
            self.extra.write(int(step), variant, list(names), values)

    def log(self, step: int, values: Mapping[str, Sequence[float]], variant: str = "") -> None:
        """Append one step from ``{metric: one value per seed}``."""
        names = list(values)
        self.log_array(step, names, np.array([list(values[n]) for n in names], dtype=float).reshape(len(names), -1),
                       variant)

    def cover(self) -> dict[str, Any]:
        """What a checkpoint records of the stream written so far: ``_lines``, ``_bytes``,
        ``_sha256`` (call after :meth:`flush`)."""
        return {"_lines": self.lines, "_bytes": self.bytes, "_sha256": self._sha.copy().hexdigest()}

    def flush(self) -> None:
        if self._handle is not None:
            self._handle.flush()
            os.fsync(self._handle.fileno())
        if self.extra is not None:
            self.extra.flush()

    def _close_stream(self) -> None:
        handle, self._handle = self._handle, None
        if handle is not None:
            try:
                handle.flush()
            finally:
                handle.close()  # closed even when the flush fails (a full disk): no handle is leaked

    def close(self) -> None:
        try:
            self._close_stream()
        finally:
            if self.extra is not None:
                self.extra.close()

    def read_bytes(self) -> bytes:
        """The stream's bytes as they are on disk (b"" when there is no file yet)."""
        if self._handle is not None:
            self._handle.flush()  # what was written so far, buffered or not
        return self.path.read_bytes() if self.path.exists() else b""

    def read_lines(self) -> list[dict[str, Any]]:
        """All complete, parseable lines (a torn last line from a kill is skipped; so is
        everything after a corrupt line: it is suspect)."""
        blob = self.read_bytes()
        _, size = complete_prefix(blob)
        return [json.loads(raw) for raw in blob[:size].splitlines()]

    def truncate_bytes(self, size: int) -> None:
        """Keep exactly the first ``size`` bytes (a checkpoint's ``_bytes``); the running
        state is rebuilt from them."""
        kept = self.read_bytes()[:size]
        atomic_write_bytes(self.path, kept)
        self._restart(kept)

    def truncate_lines(self, count: int) -> None:
        """Keep only the first ``count`` complete lines, byte for byte (a checkpoint
        without a digest records only how many it covers)."""
        blob = self.read_bytes()
        lines, size = complete_prefix(blob)
        if count < lines:
            size = 0
            for _ in range(count):
                size = blob.index(NEWLINE, size) + 1
        self.truncate_bytes(size)

    def _decoded(self, number: int, line: Any) -> tuple[int, str, list[str], np.ndarray]:
        """Stream line ``number`` (1-based) as (step, variant, names, values (K * S,)); one
        UserError line naming the file, the line and what is wrong when it is not a line this
        stream writes (a JSON list or string, a step that is not a 64-bit integer, names that
        are not text, values that are not base64 of K x S float64)."""
        where = f"{self.path}: line {number}"
        if not isinstance(line, dict):
            raise UserError(f"{where}: a JSON {type(line).__name__}, expected an object with {LINE_KEYS}")
        step, variant, names, f8 = line.get("step"), line.get("variant", ""), line.get("names"), line.get("f8")
        if not isinstance(step, int) or isinstance(step, bool) or not INT64_MIN <= step <= INT64_MAX:
            raise UserError(f"{where}: step {short_repr(step)} is not a 64-bit integer")
        if not isinstance(variant, str):
            raise UserError(f"{where}: variant {short_repr(variant)} is not text")
        if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
            raise UserError(f"{where}: names {short_repr(names)} is not a list of metric names (text)")
        try:
            values = np.frombuffer(base64.b64decode(f8, validate=True), dtype="<f8") if isinstance(f8, str) else None  # (K * S,)
        except ValueError:  # not base64 (binascii.Error), not whole float64s
            values = None
        if values is None:
            raise UserError(f"{where}: f8 {short_repr(f8)} is not base64 of float64 values")
        if len(values) != len(names) * len(self.seeds):
            raise UserError(f"{where}: f8 holds {len(values)} values, expected {len(names)} metrics x "
                            f"{len(self.seeds)} seeds")
        return step, variant, names, values

    def to_frame(self) -> pd.DataFrame:
        """Long-form metrics: step, seed, variant, metric, value (sorted by metric, step, seed);
        one UserError line for a line this stream does not write (:meth:`_decoded`)."""
        n = len(self.seeds)
        seeds = np.asarray(self.seeds, dtype=np.int64)
        steps: list[np.ndarray] = []
        names: list[str] = []
        variants: list[str] = []
        blocks: list[np.ndarray] = []
        for number, line in enumerate(self.read_lines(), start=1):
            step, variant, line_names, vals = self._decoded(number, line)
            m = len(line_names)
            blocks.append(vals)
            steps.append(np.full(m * n, step, dtype=np.int64))
            full = [f"{variant}/{name}" if variant else name for name in line_names]
            names.extend(np.repeat(np.asarray(full, dtype=object), n))
            variants.extend([variant] * (m * n))
        total = sum(len(b) for b in blocks)
        frame = pd.DataFrame({
            "step": np.concatenate(steps) if steps else np.zeros(0, np.int64),
            "seed": np.tile(seeds, total // n if n else 0),
            "variant": pd.array(variants, dtype="string"),
            "metric": pd.array(names, dtype="string"),
            "value": np.concatenate(blocks) if blocks else np.zeros(0),
        })
        return frame.sort_values(["metric", "step", "seed"], kind="stable").reset_index(drop=True)


def read_metrics_file(path: str | Path, required: Sequence[str] = FRAME_COLUMNS, *,
                      only_required: bool = False) -> pd.DataFrame:
    """The long-form metrics file ``path`` (``metrics.parquet``; only the ``required`` columns
    when ``only_required``); one UserError line naming the file when it is not readable
    Parquet, lacks one of the ``required`` columns or holds the wrong kind of values in one
    (:data:`COLUMN_KINDS`: step and seed integers, value numbers, variant and metric text)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pandas.api import types

    path = Path(path)
    try:
        present = pq.read_schema(path).names
        missing = [c for c in required if c not in present]
        if missing:
            raise UserError(f"{path}: no column(s) {', '.join(missing)}; a metrics file has columns {', '.join(required)}")
        frame = pd.read_parquet(path, columns=list(required) if only_required else None)
    except (OSError, ValueError, pa.ArrowException) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise UserError(f"{path}: not a readable metrics file ({first})") from None
    checks = {"integers": lambda c: types.is_integer_dtype(c) and not types.is_bool_dtype(c),
              "numbers": lambda c: types.is_numeric_dtype(c) and not types.is_bool_dtype(c),
              "text": types.is_string_dtype}
    for column in required:
        kind = COLUMN_KINDS.get(column)
        if kind is not None and not checks[kind](frame[column]):
            raise UserError(f"{path}: column {column} holds {frame[column].dtype} values; it must hold {kind}")
    return frame
