"""Shared by the reference-loop tests (tests/labs/*/test_reference.py): a run context that
keeps the checkpoint tensors the trainer saves at chosen steps (the stage ends), so the
batched trainer's weights there can be held to a lab's reference loop."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import torch

from stagewise.runs import MemoryContext


class StageEndContext(MemoryContext):
    """A :class:`MemoryContext` (records in ``records[step][metric]``) that checkpoints at
    ``steps`` and keeps each checkpoint's tensors in ``saved[step]`` (the trainer also saves
    at its last step)."""

    def __init__(self, seeds: list[int], steps: Iterable[int]) -> None:
        super().__init__(seeds)
        self.steps = set(steps)
        self.saved: dict[int, dict[str, torch.Tensor]] = {}

    def should_checkpoint(self, step: int) -> bool:
        return step in self.steps

    def save_checkpoint(self, step: int, tensors: Mapping[str, torch.Tensor], meta: Mapping[str, Any] | None = None,
                        *, group: int = 0) -> None:
        self.saved[step] = {k: v.detach().clone() for k, v in tensors.items()}
