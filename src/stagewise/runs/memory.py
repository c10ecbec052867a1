"""An in-memory :class:`~stagewise.labs.contract.RunContext`: train from Python and keep
the logged metrics as tensors and the tables as frames, with no run directory,
checkpoints or progress bar."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator, Mapping

import pandas as pd
import torch

from .context import Checkpoint


class MemoryContext:
    """Collects ``records[step][metric]`` (float64 tensors of shape (S,)) and ``tables``.

    Example::

        ctx = MemoryContext(seeds=[0, 1])
        train_two_stage(config, problem, ctx)
        ctx.series("W_kq.cos_target", member=0)  # (n_logged,)
    """

    def __init__(self, seeds: list[int] | None = None) -> None:
        self.seeds = list(seeds or [])
        self.records: dict[int, dict[str, torch.Tensor]] = {}
        self._tables: dict[str, dict[str, pd.DataFrame]] = {}
        self.notes: dict[str, Any] = {}
        self.snapshots: dict[str, tuple[dict[str, torch.Tensor], dict[str, Any]]] = {}

    def log(self, step: int, values: Mapping[str, torch.Tensor], *, variant: str = "") -> None:
        prefix = f"{variant}/" if variant else ""
        row = self.records.setdefault(step, {})
        row.update({f"{prefix}{k}": v.detach().to(torch.float64).cpu().clone() for k, v in values.items()})

    def log_table(self, name: str, frame: pd.DataFrame, *, part: str | int = "all", csv: bool = False) -> None:
        self._tables.setdefault(name, {})[str(part)] = frame.reset_index(drop=True)

    def names(self) -> list[str]:
        return sorted(self._tables)

    def get(self, name: str) -> pd.DataFrame | None:
        parts = self._tables.get(name)
        return pd.concat(list(parts.values()), ignore_index=True) if parts else None

    def note(self, key: str, value: Any) -> None:
        self.notes[key] = value

    def save_snapshot(self, name: str, tensors: Mapping[str, torch.Tensor], meta: Mapping[str, Any] | None = None) -> None:
        self.snapshots[name] = ({k: v.detach().cpu().clone() for k, v in tensors.items()}, dict(meta or {}))

    def stop_requested(self) -> bool:
        return False

    def should_checkpoint(self, step: int) -> bool:
        return False

    def save_checkpoint(self, step: int, tensors: Mapping[str, torch.Tensor], meta: Mapping[str, Any] | None = None,
                        *, group: int = 0) -> None:
        pass

    def resume_state(self) -> Checkpoint | None:
        return None

    def finished_part(self, key: str, config_hash: str) -> None:
        """No parts in memory: every part is evaluated in place."""
        return None

    @contextmanager
    def progress(self, total: int, description: str = "training", start: int | None = None) -> Iterator[Any]:
        """No bar or lines (a training without a run); :func:`stagewise.progress.on_progress` callbacks get events."""
        from ..progress import Progress

        with Progress(total, description, start=start or 0, quiet=True) as bar:
            yield bar.advance

    def series(self, name: str, member: int = 0) -> torch.Tensor:
        """One metric over the logged steps (step order) for one ensemble member."""
        return torch.stack([self.records[t][name][member] for t in sorted(self.records) if name in self.records[t]])
