"""The run directory: atomic files, manifest, streamed metrics and safetensors checkpoints.

Layout of a run directory::

    config.yaml          resolved config
    manifest.json        status (running/done/failed/diverged), hash, versions, seeds, times
    metrics.jsonl        append-only stream, one line per logged step (kept: resume reads it)
    metrics.parquet      long form: step, seed, metric, value (after compaction)
    summary.json         final values, fitted rates, claims
    figures/*.png|pdf
    checkpoints/step_XXXXXXXX.safetensors

Every file except the JSONL stream is written atomically (temp file + rename).
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping, Sequence

import pandas as pd
import torch
from safetensors.torch import load_file, save_file

_UMASK = os.umask(0)
os.umask(_UMASK)


# ------------------------------------------------------------------------- atomic I/O
def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temp file in the same folder and an atomic rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_UMASK)  # mkstemp makes 0600; give the usual permissions
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
    atomic_write_text(path, json.dumps(_finite(obj), indent=2, default=_json_default, allow_nan=False) + "\n")


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
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if hasattr(obj, "item"):
        return obj.item()
    raise TypeError(f"not JSON serializable: {type(obj).__name__}")


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


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
        out = subprocess.run(
            ["git", "-C", str(src), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5
        )
    except (OSError, subprocess.SubprocessError):
        return None
    sha = out.stdout.strip()
    return sha if out.returncode == 0 and sha else None


# ----------------------------------------------------------------------- metric sink
class MetricSink:
    """Append-only JSONL stream of metrics, compacted to long-form Parquet at the end.

    One line per logged step: ``{"step": t, "values": {"loss": [v_seed0, v_seed1, ...]}}``;
    the list runs over the run's seeds in order. Parquet columns: step (int64), seed
    (int64), metric (string), value (float64).
    """

    def __init__(self, path: str | Path, seeds: Sequence[int]):
        self.path = Path(path)
        self.seeds = list(seeds)
        self._handle = None
        self.lines = len(self.read_lines())  # complete lines written so far

    def _open(self):
        if self._handle is None:
            self._handle = open(self.path, "a", encoding="utf-8")
        return self._handle

    def log(self, step: int, values: Mapping[str, Sequence[float]]) -> None:
        """Append one step. ``values[metric]`` has one entry per seed."""
        for name, vals in values.items():
            if len(vals) != len(self.seeds):
                raise ValueError(f"metric {name}: {len(vals)} values for {len(self.seeds)} seeds")
        line = json.dumps({"step": int(step), "values": {k: [float(v) for v in vals] for k, vals in values.items()}})
        self._open().write(line + "\n")
        self.lines += 1

    def flush(self) -> None:
        if self._handle is not None:
            self._handle.flush()
            os.fsync(self._handle.fileno())

    def close(self) -> None:
        if self._handle is not None:
            self._handle.flush()
            self._handle.close()
            self._handle = None

    def read_lines(self) -> list[dict[str, Any]]:
        """All complete, parseable lines (a torn last line from a kill is skipped)."""
        if not self.path.exists():
            return []
        out = []
        for raw in self.path.read_text(encoding="utf-8").splitlines():
            try:
                out.append(json.loads(raw))
            except json.JSONDecodeError:
                continue
        return out

    def truncate_after(self, step: int) -> None:
        """Keep only steps <= ``step`` (used when resuming from a checkpoint at ``step``)."""
        self.close()
        kept = [line for line in self.read_lines() if line["step"] <= step]
        atomic_write_text(self.path, "".join(json.dumps(line) + "\n" for line in kept))
        self.lines = len(kept)

    def truncate_lines(self, count: int) -> None:
        """Keep only the first ``count`` lines (a checkpoint records how many it covers)."""
        self.close()
        kept = self.read_lines()[:count]
        atomic_write_text(self.path, "".join(json.dumps(line) + "\n" for line in kept))
        self.lines = len(kept)

    def to_frame(self) -> pd.DataFrame:
        """Long-form metrics: step, seed, metric, value (sorted by metric, step, seed)."""
        steps, seeds, names, values = [], [], [], []
        n = len(self.seeds)
        for line in self.read_lines():
            for name, vals in line["values"].items():
                steps.extend([line["step"]] * n)
                seeds.extend(self.seeds)
                names.extend([name] * n)
                values.extend(vals)
        frame = pd.DataFrame(
            {
                "step": pd.Series(steps, dtype="int64"),
                "seed": pd.Series(seeds, dtype="int64"),
                "metric": pd.Series(names, dtype="string"),
                "value": pd.Series(values, dtype="float64"),
            }
        )
        return frame.sort_values(["metric", "step", "seed"], kind="stable").reset_index(drop=True)


def write_parquet(frame: pd.DataFrame, path: str | Path) -> None:
    """Atomic Parquet write."""
    import io

    buf = io.BytesIO()
    frame.to_parquet(buf, index=False)
    atomic_write_bytes(path, buf.getvalue())


# ------------------------------------------------------------------------ checkpoints
class Checkpoints:
    """safetensors checkpoints ``step_XXXXXXXX.safetensors`` with JSON metadata; keeps the
    newest ``keep``."""

    def __init__(self, folder: str | Path, keep: int = 2):
        self.folder = Path(folder)
        self.keep = keep

    def save(self, step: int, tensors: Mapping[str, torch.Tensor], meta: Mapping[str, Any] | None = None) -> Path:
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / f"step_{step:08d}.safetensors"
        tmp = self.folder / f".{path.name}.tmp"
        payload = {k: v.detach().contiguous().cpu() for k, v in tensors.items()}
        save_file(payload, str(tmp), metadata={"step": str(step), "meta": json.dumps(dict(meta or {}))})
        with open(tmp, "rb") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, path)
        for old in self.list()[: -self.keep]:
            old.unlink(missing_ok=True)
        return path

    def list(self) -> list[Path]:
        if not self.folder.exists():
            return []
        return sorted(self.folder.glob("step_*.safetensors"))

    def latest(self) -> tuple[int, dict[str, torch.Tensor], dict[str, Any]] | None:
        """(step, tensors, meta) of the newest readable checkpoint, or None."""
        from safetensors import safe_open

        for path in reversed(self.list()):
            try:
                with safe_open(str(path), framework="pt") as handle:
                    metadata = handle.metadata() or {}
                tensors = load_file(str(path))
            except Exception:  # a torn file from a kill: fall back to the previous one
                continue
            # fresh (aligned) buffers: kernels may round differently on odd alignments, and a
            # resumed run must repeat the uninterrupted one bit for bit
            tensors = {k: v.clone() for k, v in tensors.items()}
            return int(metadata["step"]), tensors, json.loads(metadata.get("meta", "{}"))
        return None

