"""An in-memory stand-in for :class:`~stagewise.runs.RunContext`: train from Python and
keep the logged metrics as tensors, with no run directory, checkpoints or progress bar."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator, Mapping

import torch


class MemoryContext:
    """Collects ``records[step][metric]`` (float64 tensors of shape (S,)).

    Example::

        ctx = MemoryContext()
        train(config, problem, ctx)
        ctx.series("cos_wkq", member=0)  # (n_logged,)
    """

    def __init__(self) -> None:
        self.records: dict[int, dict[str, torch.Tensor]] = {}

    def log(self, step: int, values: Mapping[str, torch.Tensor]) -> None:
        self.records[step] = {k: v.detach().to(torch.float64).clone() for k, v in values.items()}

    def should_checkpoint(self, step: int) -> bool:
        return False

    def save_checkpoint(self, step: int, tensors: Mapping[str, torch.Tensor], meta: Mapping[str, Any] | None = None) -> None:
        pass

    def resume_state(self) -> None:
        return None

    @contextmanager
    def progress(self, total: int, description: str = "training", start: int | None = None) -> Iterator[Any]:
        yield lambda n=1: None

    def series(self, name: str, member: int = 0) -> torch.Tensor:
        """One metric over the logged steps (step order) for one ensemble member."""
        return torch.stack([self.records[t][name][member] for t in sorted(self.records) if name in self.records[t]])
