"""Execute one lab run inside a run directory: create or resume, stream, finish.

The lab contract (see :mod:`stagewise.labs`): ``lab.run(config, ctx) -> extras`` streams
metrics through ``ctx`` (a :class:`RunContext`) and saves checkpoints through it; after it
returns, the runner compacts metrics to Parquet and asks the lab for its summary and
figures. A killed run is resumed from its newest checkpoint; metric lines logged after
that checkpoint are dropped and recomputed, so a resumed run ends with the same numbers.
"""

from __future__ import annotations

import json
import socket
import traceback
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping

import torch
import yaml

from ..config import config_hash, to_yaml, validate
from ..errors import UserError
from .store import (
    Checkpoints,
    MetricSink,
    atomic_write_json,
    atomic_write_text,
    git_sha,
    now_iso,
    package_versions,
    write_parquet,
)


class Diverged(Exception):
    """Raised by a lab when a loss or weight becomes NaN/inf; names the step and seed."""

    def __init__(self, step: int, seed: int, what: str):
        self.step, self.seed, self.what = step, seed, what
        super().__init__(f"diverged at step {step}, seed {seed}: {what}")


@dataclass
class RunPaths:
    root: Path

    @property
    def config(self) -> Path:
        return self.root / "config.yaml"

    @property
    def manifest(self) -> Path:
        return self.root / "manifest.json"

    @property
    def metrics_jsonl(self) -> Path:
        return self.root / "metrics.jsonl"

    @property
    def metrics(self) -> Path:
        return self.root / "metrics.parquet"

    @property
    def summary(self) -> Path:
        return self.root / "summary.json"

    @property
    def figures(self) -> Path:
        return self.root / "figures"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"


class RunContext:
    """What a lab sees of the run store while it trains.

    Attributes:
        seeds: the ensemble's seeds, in the order of the ensemble axis.
        paths: the run directory's paths (a lab may write extra artifacts under ``root``).
    """

    def __init__(self, paths: RunPaths, seeds: list[int], checkpoint_every: int, progress: bool):
        self.paths = paths
        self.seeds = seeds
        self.checkpoint_every = checkpoint_every
        self.sink = MetricSink(paths.metrics_jsonl, seeds)
        self.checkpoints = Checkpoints(paths.checkpoints)
        self.show_progress = progress
        self._resume: tuple[int, dict[str, torch.Tensor], dict[str, Any]] | None = None

    # metrics ----------------------------------------------------------------------
    def log(self, step: int, values: Mapping[str, torch.Tensor]) -> None:
        """Log per-seed values, each a tensor of shape (S,), for one step."""
        names = list(values)
        stacked = torch.stack([values[n].detach().reshape(-1).to(torch.float64).cpu() for n in names])  # (M, S)
        rows = stacked.tolist()
        self.sink.log(step, dict(zip(names, rows)))

    # checkpoints -------------------------------------------------------------------
    def should_checkpoint(self, step: int) -> bool:
        return self.checkpoint_every > 0 and step % self.checkpoint_every == 0

    def save_checkpoint(self, step: int, tensors: Mapping[str, torch.Tensor], meta: Mapping[str, Any] | None = None) -> None:
        """Flush metrics first, then write the checkpoint atomically. The checkpoint records
        how many metric lines it covers (``_lines``), so a resume keeps exactly those."""
        self.sink.flush()
        self.checkpoints.save(step, tensors, {**dict(meta or {}), "_lines": self.sink.lines})

    def resume_state(self) -> tuple[int, dict[str, torch.Tensor], dict[str, Any]] | None:
        """(step, tensors, meta) to continue from, or None for a fresh start."""
        return self._resume

    # progress ----------------------------------------------------------------------
    @contextmanager
    def progress(self, total: int, description: str = "training", start: int | None = None) -> Iterator[Any]:
        """A rich progress bar (steps, ETA); silent when stderr is not a terminal.

        ``start`` is the step already done (default: the resumed checkpoint's step).
        Yields a callable ``advance(n=1)``.
        """
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        console = Console(stderr=True)
        if not (self.show_progress and console.is_terminal):
            yield lambda n=1: None
            return
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
        with Progress(*columns, console=console, transient=True) as bar:
            if start is None:
                start = self._resume[0] if self._resume else 0
            task = bar.add_task(description, total=total, completed=start)
            yield lambda n=1: bar.advance(task, n)


def _seeds(config: Any) -> list[int]:
    return [int(config.seed) + i for i in range(int(config.n_seeds))]


def read_manifest(run_dir: str | Path) -> dict[str, Any]:
    path = RunPaths(Path(run_dir)).manifest
    if not path.is_file():
        raise UserError(f"{run_dir}: not a run directory (no manifest.json)")
    return json.loads(path.read_text())


def _update_manifest(paths: RunPaths, **changes: Any) -> dict[str, Any]:
    manifest = json.loads(paths.manifest.read_text())
    manifest.update(changes)
    atomic_write_json(paths.manifest, manifest)
    return manifest


def prepare(lab: Any, config: Any, out: str | Path) -> RunPaths:
    """Create a fresh run directory with config.yaml and a 'running' manifest."""
    paths = RunPaths(Path(out))
    if paths.root.exists() and any(paths.root.iterdir()):
        raise UserError(f"--out {out}: directory exists and is not empty; choose another or use --resume {out}")
    paths.root.mkdir(parents=True, exist_ok=True)
    atomic_write_text(paths.config, to_yaml(config))
    atomic_write_json(
        paths.manifest,
        {
            "lab": lab.NAME,
            "status": "running",
            "config_hash": config_hash(config),
            "seeds": _seeds(config),
            "versions": package_versions(),
            "git_sha": git_sha(),
            "host": socket.gethostname(),
            "started": now_iso(),
            "ended": None,
            "error": None,
        },
    )
    return paths


def load_for_resume(run_dir: str | Path) -> tuple[Any, Any]:
    """(lab module, validated config) of an existing run directory."""
    from ..labs import get_lab

    manifest = read_manifest(run_dir)
    lab = get_lab(manifest["lab"])
    config = validate(lab.Config, yaml.safe_load(RunPaths(Path(run_dir)).config.read_text()) or {})
    if config_hash(config) != manifest["config_hash"]:
        raise UserError(f"--resume {run_dir}: config.yaml does not match the manifest's config hash")
    return lab, config


def execute(lab: Any, config: Any, paths: RunPaths, *, resume: bool = False, progress: bool = True) -> dict[str, Any]:
    """Run (or resume) ``lab`` with ``config`` in ``paths``; returns the final manifest.

    Failures are recorded in the manifest (status failed/diverged, error message) and the
    metrics logged so far are compacted, then the exception propagates.
    """
    ctx = RunContext(paths, _seeds(config), getattr(getattr(config, "train", None), "checkpoint_every", 0), progress)
    if resume:
        state = ctx.checkpoints.latest()
        ctx._resume = state
        if state is not None and "_lines" in state[2]:
            ctx.sink.truncate_lines(state[2]["_lines"])
        else:
            ctx.sink.truncate_after(state[0] if state else -1)
        _update_manifest(paths, status="running", error=None, ended=None, resumed=now_iso())
    try:
        extras = lab.run(config, ctx)
        ctx.sink.close()
        frame = ctx.sink.to_frame()
        write_parquet(frame, paths.metrics)
        summary = lab.summarize(config, frame, extras)
        atomic_write_json(paths.summary, summary)
        lab.make_figures(config, frame, summary, paths.figures)
        return _update_manifest(paths, status="done", ended=now_iso())
    except Diverged as err:
        _finish_failed(ctx, paths)
        _update_manifest(paths, status="diverged", ended=now_iso(), error=str(err),
                         diverged={"step": err.step, "seed": err.seed, "what": err.what})
        raise
    except BaseException as err:
        _finish_failed(ctx, paths)
        message = f"{type(err).__name__}: {err}" if str(err) else type(err).__name__
        if isinstance(err, KeyboardInterrupt):
            message = f"interrupted ({message}); resume with: stagewise run --resume {paths.root}"
        atomic_write_text(paths.root / "error.log", traceback.format_exc())
        _update_manifest(paths, status="failed", ended=now_iso(), error=message)
        raise


def _finish_failed(ctx: RunContext, paths: RunPaths) -> None:
    """Keep what was logged: compact the stream so far to Parquet."""
    try:
        ctx.sink.close()
        write_parquet(ctx.sink.to_frame(), paths.metrics)
    except Exception:  # never mask the original error
        pass
