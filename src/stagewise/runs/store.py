"""The run directory's files: atomic writes, the metric stream, checksummed checkpoints,
and tables (the writer lock is in :mod:`.lock`).

Layout of a run directory (see docs/run-store.md)::

    config.yaml          resolved config
    manifest.json        status, hash, versions, seeds, times, tables
    metrics.jsonl        append-only stream, one line per logged step (resume reads it)
    metrics.parquet      long form: step, seed, variant, metric, value (after compaction)
    tables/NAME.parquet  per-example / per-variant records (ctx.log_table), one file per table
    summary.json         the Summary (final values, per seed, claims, details)
    figures/*.png|pdf
    checkpoints/ckpt_GGGG_SSSSSSSSSS.safetensors   (sha256 of their content in their metadata)
    .lock                held by the one process writing the directory

Every file except the JSONL stream is written atomically (temp file + rename,
:mod:`.atomic`); the stream (:mod:`.stream`) is appended to, and a checkpoint records a
sha256 of the stream bytes it covers.
"""

from __future__ import annotations

import hashlib
import json
import platform
import subprocess
from pathlib import Path
from typing import Any, Mapping, Sequence

import pandas as pd
import torch
from safetensors import SafetensorError
from safetensors.torch import load, save

# re-exported: atomic writes live in atomic.py, the metric stream in stream.py, the writer lock in lock.py
from .atomic import atomic_write_bytes, atomic_write_json, atomic_write_text, now_iso, write_parquet  # noqa: F401
from .lock import FILE_MODE, RunLock  # noqa: F401
from .stream import MetricSink  # noqa: F401


# --------------------------------------------------------------------------- manifest
def package_versions() -> dict[str, str]:
    from importlib import metadata

    out = {"python": platform.python_version()}
    for name in ("stagewise", "torch", "numpy", "scipy", "pandas", "pyarrow", "cvxpy", "clarabel", "pydantic"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return out


def git_sha() -> str | None:
    """SHA of the git checkout holding the stagewise sources, if any."""
    src = Path(__file__).resolve().parent
    try:
        out = subprocess.run(["git", "-C", str(src), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    sha = out.stdout.strip()
    return sha if out.returncode == 0 and sha else None


# ------------------------------------------------------------------------ checkpoints
def _digest(tensors: Mapping[str, torch.Tensor], meta_json: str) -> str:
    """sha256 over the metadata and every tensor (name, dtype, shape, bytes), in name order."""
    h = hashlib.sha256(meta_json.encode())
    for name in sorted(tensors):
        t = tensors[name].contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")  # 0-d tensors too
    return h.hexdigest()


class Checkpoints:
    """safetensors checkpoints ``ckpt_GGGG_SSSSSSSSSS.safetensors`` (group, step) with JSON
    metadata and a sha256 of their content; keeps the newest ``keep``.

    A checkpoint whose checksum does not match (a flipped byte), that cannot be parsed (a
    torn write) or that fails the caller's ``accept`` test is skipped in favour of an
    older one.
    """

    def __init__(self, folder: str | Path, keep: int = 2):
        self.folder = Path(folder)
        self.keep = keep

    def save(self, step: int, tensors: Mapping[str, torch.Tensor], meta: Mapping[str, Any] | None = None,
             group: int = 0) -> Path:
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / f"ckpt_{group:04d}_{step:010d}.safetensors"
        payload = {k: v.detach().contiguous().cpu() for k, v in tensors.items()}
        meta_json = json.dumps(dict(meta or {}), sort_keys=True)
        header = {"step": str(step), "group": str(group), "meta": meta_json, "sha256": _digest(payload, meta_json)}
        atomic_write_bytes(path, save(payload, metadata=header))
        for old in self.list()[: -self.keep]:
            old.unlink(missing_ok=True)
        return path

    def list(self) -> list[Path]:
        if not self.folder.exists():
            return []
        return sorted(self.folder.glob("ckpt_*.safetensors"))

    def read(self, path: Path) -> tuple[int, int, dict[str, torch.Tensor], dict[str, Any]] | None:
        """(group, step, tensors, meta) of one verified checkpoint, or None when it is bad."""
        try:
            blob = path.read_bytes()
            n = int.from_bytes(blob[:8], "little")
            header = json.loads(blob[8:8 + n]).get("__metadata__") or {}
            tensors = load(blob)
        except (OSError, ValueError, SafetensorError, json.JSONDecodeError, UnicodeDecodeError):
            return None
        # fresh (aligned) buffers: kernels may round differently on odd alignments, and a
        # resumed run must repeat the uninterrupted one bit for bit
        tensors = {k: v.clone() for k, v in tensors.items()}
        meta_json = header.get("meta", "{}")
        if header.get("sha256") != _digest(tensors, meta_json):
            return None
        try:
            return int(header["group"]), int(header["step"]), tensors, json.loads(meta_json)
        except (KeyError, ValueError):
            return None

    def latest(self, accept=None) -> tuple[int, int, dict[str, torch.Tensor], dict[str, Any]] | None:
        """The newest verified checkpoint that ``accept(meta)`` allows (default: any)."""
        for path in reversed(self.list()):
            found = self.read(path)
            if found is not None and (accept is None or accept(found[3])):
                return found
        return None


def save_snapshot(path: str | Path, tensors: Mapping[str, torch.Tensor], meta: Mapping[str, Any] | None = None) -> Path:
    """Write weights to ``path`` (safetensors, atomically) with JSON ``meta`` and a sha256."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {k: v.detach().contiguous().cpu() for k, v in tensors.items()}
    meta_json = json.dumps(dict(meta or {}), sort_keys=True)
    atomic_write_bytes(path, save(payload, metadata={"meta": meta_json, "sha256": _digest(payload, meta_json)}))
    return path


def load_snapshot(path: str | Path) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """(tensors, meta) of a snapshot; ValueError when it is unreadable or its checksum fails."""
    path = Path(path)
    try:
        blob = path.read_bytes()
        n = int.from_bytes(blob[:8], "little")
        header = json.loads(blob[8:8 + n]).get("__metadata__") or {}
        tensors = {k: v.clone() for k, v in load(blob).items()}
    except (OSError, ValueError, SafetensorError, json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"{path}: not a readable snapshot ({err})") from None
    meta_json = header.get("meta", "{}")
    if header.get("sha256") != _digest(tensors, meta_json):
        raise ValueError(f"{path}: checksum mismatch (the file is corrupt)")
    return tensors, json.loads(meta_json)


# ----------------------------------------------------------------------------- tables
class TableStore:
    """``tables/NAME.parquet``: one file per table, written atomically, rows grouped in
    *parts* (column ``_part``, e.g. one per epoch). Logging a part again replaces it, so a
    resumed run that repeats a part leaves no duplicates."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        self._index: dict[str, list[str]] | None = None  # name -> parts, read from disk once

    def path(self, name: str) -> Path:
        return self.folder / f"{name}.parquet"

    def names(self) -> list[str]:
        return sorted(p.stem for p in self.folder.glob("*.parquet")) if self.folder.exists() else []

    def get(self, name: str) -> pd.DataFrame | None:
        path = self.path(name)
        if not path.exists():
            return None
        frame = pd.read_parquet(path)
        return frame.drop(columns=["_part"], errors="ignore")

    def _raw(self, name: str) -> pd.DataFrame | None:
        path = self.path(name)
        return pd.read_parquet(path) if path.exists() else None

    def write(self, name: str, frame: pd.DataFrame, part: str) -> pd.DataFrame:
        """Replace ``part`` of table ``name`` with ``frame``; returns the whole table as written
        (with its ``_part`` column)."""
        frame = frame.reset_index(drop=True).assign(_part=str(part))
        old = self._raw(name)
        if old is not None and len(old):
            frame = pd.concat([old[old["_part"] != str(part)], frame], ignore_index=True)
        write_parquet(frame, self.path(name))
        self._loaded_index()[name] = list(dict.fromkeys(frame["_part"].tolist()))  # built before it is changed
        return frame

    def entry(self, name: str, frame: pd.DataFrame) -> dict[str, Any]:
        parts = list(dict.fromkeys(frame["_part"].tolist()))
        return {"path": f"tables/{name}.parquet", "rows": int(len(frame)), "parts": parts,
                "columns": [c for c in frame.columns if c != "_part"]}

    def keep_parts(self, kept: Mapping[str, Sequence[str]]) -> None:
        """Drop every part not listed in ``kept`` (a checkpoint's record); tables it does
        not name are removed."""
        for name in self.names():
            frame = self._raw(name)
            allowed = set(map(str, kept.get(name, [])))
            if not allowed:
                self.path(name).unlink()
                continue
            if frame is not None and not set(frame["_part"]) <= allowed:
                write_parquet(frame[frame["_part"].isin(allowed)].reset_index(drop=True), self.path(name))
        self._index = None  # read again from disk

    def parts(self) -> dict[str, list[str]]:
        """Table name -> its parts in write order (read from disk on first use, then kept up
        to date by :meth:`write`, so a checkpoint does not re-read every table)."""
        return {name: list(parts) for name, parts in self._loaded_index().items()}

    def _loaded_index(self) -> dict[str, list[str]]:
        """The name -> parts index itself, read from disk if it is not loaded."""
        if self._index is None:
            self._index = {}
            for name in self.names():
                frame = self._raw(name)
                self._index[name] = list(dict.fromkeys(frame["_part"].tolist())) if frame is not None else []
        return self._index


def safe_csv(frame: pd.DataFrame) -> str:
    """CSV with every field quoted and spreadsheet formulas neutralized (a cell starting
    with = + - @ or a tab/CR gets a leading apostrophe)."""
    import csv

    def cell(value: Any) -> Any:
        if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
            return "'" + value
        return value

    safe = frame.map(cell) if hasattr(frame, "map") else frame.applymap(cell)
    return safe.to_csv(index=False, quoting=csv.QUOTE_ALL)
