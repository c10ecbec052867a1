"""Atomic file writes of the run store (temp file in the same folder + rename) and the
strict-JSON encoding every JSON file of a run uses."""

from __future__ import annotations

import io
import json
import os
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from .lock import FILE_MODE


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temp file in the same folder and an atomic rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, FILE_MODE)  # mkstemp makes 0600; give the usual permissions
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode())


def atomic_write_json(path: str | Path, obj: Any) -> None:
    """Strict JSON (NaN and infinities become null, so any JSON reader accepts the file)."""
    atomic_write_text(path, json.dumps(_finite(obj), indent=2, default=_json_default, allow_nan=False,
                                       ensure_ascii=False) + "\n")


def _finite(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj if obj == obj and obj not in (float("inf"), float("-inf")) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def _json_default(obj: Any) -> Any:
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, (np.ndarray, torch.Tensor)):
        return _finite(obj.tolist())
    if isinstance(obj, (np.generic,)):
        return _finite(obj.item())
    raise TypeError(f"not JSON serializable: {type(obj).__name__}")


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def write_parquet(frame: pd.DataFrame, path: str | Path) -> None:
    """Atomic Parquet write."""
    buf = io.BytesIO()
    frame.to_parquet(buf, index=False)
    atomic_write_bytes(path, buf.getvalue())


