"""The run directory as a :class:`~stagewise.labs.contract.RunContext`: metrics, tables,
checkpoints, progress, and stop requests (SIGINT/SIGTERM become a checkpoint).

Resume consistency: every checkpoint records the metric stream it covers (``_lines``
lines, ``_bytes`` bytes and their ``_sha256``: :mod:`.stream`) and which table parts
(``_tables``). On resume the newest checkpoint whose records are all present, byte for
byte, is used (a flipped byte in it, a torn file, a stream cut shorter than it says, one
altered character in a line it covers: all fall back to an older checkpoint, or to a
fresh start); the stream and tables are cut back to exactly what it covers. What was
passed over is recorded in the manifest's notes (``resume_fallback``). Checkpoints
written before the digest existed record ``_lines`` only and are checked by count.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence, overload

import pandas as pd
import torch

from .store import Checkpoints, TableStore, atomic_write_text, safe_csv, save_snapshot
from .stream import MetricSink, complete_prefix, matches
from .sinks import open_sinks, resolve_sinks
from .stops import Interrupted

__all__ = ["Checkpoint", "Interrupted", "RunDirContext", "RunPaths"]  # Interrupted lives in .stops (light)


class _Entry:
    """A fixed entry of the run directory: ``RunPaths.NAME`` is ``root / file``."""

    def __init__(self, file: str):
        self.file = file

    @overload
    def __get__(self, obj: None, owner: type) -> "_Entry": ...
    @overload
    def __get__(self, obj: "RunPaths", owner: type) -> Path: ...
    def __get__(self, obj: "RunPaths | None", owner: type) -> "Path | _Entry":
        return self if obj is None else obj.root / self.file


@dataclass(frozen=True)
class RunPaths:
    """The layout of a run directory (docs/run-store.md): each attribute is ``root / name``."""

    root: Path

    config = _Entry("config.yaml")
    manifest = _Entry("manifest.json")
    metrics_jsonl = _Entry("metrics.jsonl")
    metrics = _Entry("metrics.parquet")
    summary = _Entry("summary.json")
    figures = _Entry("figures")
    checkpoints = _Entry("checkpoints")
    tables = _Entry("tables")
    error_log = _Entry("error.log")
    snapshots = _Entry("snapshots")
    parts = _Entry("parts")  # runs this run is split into, dispatched to an executor (parts/runs/KEY)


@dataclass(frozen=True)
class Checkpoint:
    """A checkpoint to resume from: ``group`` (e.g. an experiment's group index) and
    ``step`` within it, the saved tensors and the lab's metadata."""

    step: int
    tensors: dict[str, torch.Tensor]
    meta: dict[str, Any]
    group: int = 0


class RunDirContext:
    """What a lab sees of a run directory while it runs (implements ``RunContext``).

    ``sinks`` (with the names in ``STAGEWISE_SINKS``) selects extra sinks fed from the same
    metric records (``tensorboard``, ``wandb``: :mod:`stagewise.runs.sinks`); a bad name or
    a missing package is a UserError here.

    Attributes:
        seeds: the ensemble's seeds, in the order of the ensemble axis.
        paths: the run directory's paths.
    """

    def __init__(self, paths: RunPaths, seeds: list[int], checkpoint_every: int, progress: bool | Callable[[Any], None],
                 on_table: Callable[[str, dict[str, Any]], None] | None = None,
                 on_note: Callable[[str, Any], None] | None = None, *, sinks: Sequence[str] | None = None):
        self.paths = paths
        self.seeds = list(seeds)
        self.checkpoint_every = checkpoint_every
        self.sink = MetricSink(paths.metrics_jsonl, seeds, extra=open_sinks(resolve_sinks(sinks), paths.root, seeds))
        self.checkpoints = Checkpoints(paths.checkpoints)
        self.tables = TableStore(paths.tables)
        self.show_progress = progress
        self.stop_signal: int | None = None
        self._graceful = False
        self._stopping = False  # a stop is being recorded: later signals change nothing
        self._resume: Checkpoint | None = None
        self._on_table = on_table
        self._on_note = on_note
        self.notes: dict[str, Any] = {}

    # metrics ----------------------------------------------------------------------
    def log(self, step: int, values: Mapping[str, torch.Tensor], *, variant: str = "") -> None:
        """Log per-seed values, each a tensor of shape (S,), for one step (one device copy)."""
        names = list(values)
        stacked = torch.stack([values[n].detach().reshape(-1).to(torch.float64) for n in names])  # (K, S)
        self.sink.log_array(step, names, stacked.cpu().numpy(), variant)

    # tables ------------------------------------------------------------------------
    def log_table(self, name: str, frame: pd.DataFrame, *, part: str | int = "all", csv: bool = False) -> None:
        """Write part ``part`` of ``tables/NAME.parquet`` (replacing an earlier write of
        that part); ``csv`` also exports ``tables/NAME.csv`` (quoted, formula-safe)."""
        if not name.replace("_", "").replace("-", "").isalnum():
            raise ValueError(f"table name {name!r}: use letters, digits, '_' and '-'")
        table = self.tables.write(name, frame, str(part))
        entry = self.tables.entry(name, table)
        if csv:
            atomic_write_text(self.paths.tables / f"{name}.csv", safe_csv(table.drop(columns="_part")))
        if self._on_table is not None:
            self._on_table(name, entry)

    # notes and snapshots -------------------------------------------------------------
    def note(self, key: str, value: Any) -> None:
        """Record a JSON-able fact of the run in the manifest's ``notes`` (e.g. dropped examples)."""
        self.notes[key] = value
        if self._on_note is not None:
            self._on_note(key, value)

    def save_snapshot(self, name: str, tensors: Mapping[str, torch.Tensor], meta: Mapping[str, Any] | None = None) -> Path:
        """Keep ``snapshots/NAME.safetensors`` (weights to load later, with a sha256); replaced if written again."""
        if not name.replace("_", "").replace("-", "").isalnum():
            raise ValueError(f"snapshot name {name!r}: use letters, digits, '_' and '-'")
        return save_snapshot(self.paths.snapshots / f"{name}.safetensors", tensors, meta)

    # checkpoints -------------------------------------------------------------------
    def stop_requested(self) -> bool:
        """True once SIGINT/SIGTERM asked a training loop to stop (save a checkpoint now)."""
        return self.stop_signal is not None

    def should_checkpoint(self, step: int) -> bool:
        if self.stop_signal is not None:
            return True
        return self.checkpoint_every > 0 and step % self.checkpoint_every == 0

    def save_checkpoint(self, step: int, tensors: Mapping[str, torch.Tensor], meta: Mapping[str, Any] | None = None,
                        *, group: int = 0) -> None:
        """Flush metrics, then write the checkpoint atomically with the metric lines and
        table parts it covers. Raises :class:`Interrupted` after saving if a stop was requested."""
        self.sink.flush()
        record = {**dict(meta or {}), **self.sink.cover(), "_tables": self.tables.parts()}
        self.checkpoints.save(step, tensors, record, group=group)
        if self.stop_signal is not None:
            self._stopping = True
            raise Interrupted(self.stop_signal)

    def resume_state(self) -> Checkpoint | None:
        return self._resume

    def prepare_resume(self) -> Checkpoint | None:
        """Pick the newest consistent checkpoint and cut the stream and tables back to it
        (none: a fresh start, stream and tables emptied). Checkpoints passed over are noted
        in ``resume_fallback`` (their file names and why)."""
        blob = self.sink.read_bytes()
        available, _ = complete_prefix(blob)
        parts = self.tables.parts()

        def problem(meta: dict[str, Any]) -> str | None:
            """Why the run cannot resume from a checkpoint with this record (None: it can)."""
            if "_sha256" in meta:
                if not matches(blob, meta):
                    return (f"metrics.jsonl bytes 0..{meta['_bytes']} differ from its digest "
                            f"(the stream holds {len(blob)} bytes)")
            elif meta.get("_lines", 0) > available:
                return f"it covers {meta['_lines']} metric lines, metrics.jsonl holds {available} complete ones"
            for name, p in meta.get("_tables", {}).items():
                missing = sorted(set(map(str, p)) - set(parts.get(name, [])))
                if missing:
                    return f"table {name} lacks its parts {missing[:3]}"
            return None

        found, passed = None, []
        for path in reversed(self.checkpoints.list()):
            read = self.checkpoints.read(path)
            why = "unreadable or its checksum fails" if read is None else problem(read[3])
            if why is None:
                found = read
                break
            passed.append(f"{path.name}: {why}")
        if found is None:
            self.sink.truncate_bytes(0)
            self.tables.keep_parts({})
            self._resume = None
        else:
            group, step, tensors, meta = found
            if "_sha256" in meta:
                self.sink.truncate_bytes(int(meta["_bytes"]))
            else:
                self.sink.truncate_lines(int(meta.get("_lines", 0)))
            self.tables.keep_parts(meta.get("_tables", {}))
            self._resume = Checkpoint(step, tensors, meta, group)
        if passed:
            start = f"step {found[1]} of group {found[0]}" if found is not None else "a fresh start"
            self.note("resume_fallback", {"resumed_from": start, "passed_over": passed})
        return self._resume

    # stop requests -----------------------------------------------------------------
    def request_stop(self, signum: int) -> None:
        """Signal handler body: inside a training loop, checkpoint at the next step and
        stop; elsewhere (or on a second signal) stop at once. Once a stop has been raised, or
        :meth:`finishing` was called, later signals are ignored: the outcome being recorded
        (the manifest, the metrics so far) is never cut off by a second signal."""
        if self._stopping:
            return
        if self._graceful and self.stop_signal is None:
            self.stop_signal = signum
            return
        self._stopping = True
        self.stop_signal = self.stop_signal or signum
        raise Interrupted(signum)

    def finishing(self) -> None:
        """The run is recording its outcome (done, failed, diverged, interrupted): from now on
        SIGINT/SIGTERM are ignored until the run's handlers are restored."""
        self._stopping = True

    def finished_part(self, key: str, config_hash: str) -> tuple[pd.DataFrame, TableStore] | None:
        """(metrics, tables) of the finished run ``parts/runs/KEY`` whose config hash is
        ``config_hash``, else None (absent, unfinished, another config, or unreadable)."""
        from .manifest import finished_with

        folder = self.paths.parts / "runs" / key
        if not finished_with(folder, config_hash):  # absent, unfinished or damaged: the part is evaluated again
            return None
        part = RunPaths(folder)
        try:
            return pd.read_parquet(part.metrics), TableStore(part.tables)
        except (OSError, ValueError):
            return None

    # progress ----------------------------------------------------------------------
    @contextmanager
    def progress(self, total: int, description: str = "training", start: int | None = None) -> Iterator[Any]:
        """Progress of a training loop (:class:`stagewise.progress.Progress`: a rich bar on a
        terminal, a plain line every few seconds elsewhere, events to Python callbacks).

        ``start`` is the step already done (default: the resumed checkpoint's step).
        Yields a callable ``advance(n=1)``. Stop requests inside become checkpoints.
        """
        from ..progress import Progress

        self._graceful = True
        try:
            if start is None:
                start = self._resume.step if self._resume else 0
            callback = self.show_progress if callable(self.show_progress) else None
            with Progress(total, description, unit="steps", start=start, quiet=callback is not None or not self.show_progress,
                          callbacks=(callback,) if callback else ()) as bar:
                yield bar.advance
        finally:
            self._graceful = False

