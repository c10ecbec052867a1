"""Several trainings in one run: groups, trained one after another, each resumable.

A *group* is one batched training of a run (an ntp comparison variant, a disentangled
ablation or d value). Its training loop sees a :class:`GroupContext` instead of the run's
context, which

* tags its records with the group's variant: a fixed name (metric names ``{variant}/{name}``),
  or one name per ensemble member, which splits each (S,) vector of member values into one
  record per variant, of that variant's members in their order (e.g. (K * S,) seeds x
  ablations -> K records of (S,));
* saves its checkpoints with the group's index (the checkpoint's ``group`` field), its
  metadata extended by the group's own entries;
* resumes only from a checkpoint of this group (a checkpoint of an earlier group: start
  fresh, the earlier group is finished);
* hands everything else (tables, progress, stop requests, notes, snapshots) to the run's.

:func:`run_groups` trains the groups in order and, after a resume, skips the groups
finished before the resumed checkpoint's group; that group's context finds the checkpoint::

    def train_variant(index, name):
        return train(variant_config(config, name), GroupContext(ctx, index, name, meta={"variant": name}))

    params = run_groups(ctx, ["two_stage", "adam"], train_variant)   # [Params | None, Params | None]

The parent context is any :class:`~stagewise.labs.contract.RunContext` (a run directory's
or :class:`~stagewise.runs.MemoryContext`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, TypeVar

import pandas as pd
import torch

from .context import Checkpoint

G = TypeVar("G")
R = TypeVar("R")


def resumed_group(ctx: Any) -> int:
    """The group index of ``ctx``'s resumed checkpoint (0 for a fresh start)."""
    state = ctx.resume_state()
    return 0 if state is None else state.group


def run_groups(ctx: Any, groups: Sequence[G], train: Callable[[int, G], R]) -> list[R | None]:
    """``train(index, group)`` for each group in order; returns the results, None for a group
    skipped because it finished before the resumed checkpoint (its records and tables are
    already in the run). ``train`` builds the group's :class:`GroupContext` on ``ctx``."""
    first = resumed_group(ctx)
    return [None if index < first else train(index, group) for index, group in enumerate(groups)]


class GroupContext:
    """The run context of group number ``index`` (see the module docstring).

    Args:
        ctx: the run's context.
        index: the group's index (0, 1, ... in training order), saved as the checkpoints' ``group``.
        variant: the records' variant: one name for all of them, or one name per ensemble
            member (S,) (values logged are then (S,) member vectors; one record per variant).
        meta: entries added to every checkpoint's metadata (after the loop's own).

    Attributes:
        seeds: the run's seeds (S,), as ``ctx.seeds``.
    """

    def __init__(self, ctx: Any, index: int, variant: str | Sequence[str] = "", meta: Mapping[str, Any] | None = None):
        self._ctx, self.index, self.meta = ctx, index, dict(meta or {})
        self.variant = variant if isinstance(variant, str) else list(variant)
        self.seeds: list[int] = getattr(ctx, "seeds", [])  # a bare test context may have none
        self._members: dict[str, list[int]] = {}  # variant -> its members' positions, in first-seen order
        if not isinstance(self.variant, str):
            for i, name in enumerate(self.variant):
                self._members.setdefault(name, []).append(i)

    def log(self, step: int, values: Mapping[str, torch.Tensor], *, variant: str = "") -> None:
        """Log one step's values under the group's variant(s); the caller's ``variant`` is
        not used (the group decides). Per-member variants: each value is (S,), and each
        variant's record holds its members' entries, (M_v,)."""
        if isinstance(self.variant, str):
            self._ctx.log(step, values, variant=self.variant)
            return
        names = list(values)
        stacked = torch.stack([values[n] for n in names])  # (K, S)
        for name, members in self._members.items():
            block = stacked[:, torch.tensor(members)]  # (K, M_v)
            self._ctx.log(step, dict(zip(names, block.unbind(0))), variant=name)

    def save_checkpoint(self, step: int, tensors: Mapping[str, torch.Tensor], meta: Mapping[str, Any] | None = None,
                        *, group: int = 0) -> None:
        """Save through the run's context with ``group=index`` (the caller's ``group`` is not
        used) and the metadata ``{**meta, **self.meta}``."""
        record = {**dict(meta or {}), **self.meta} if self.meta else meta
        self._ctx.save_checkpoint(step, tensors, record, group=self.index)

    def resume_state(self) -> Checkpoint | None:
        """The run's resumed checkpoint when it belongs to this group, else None (a fresh start)."""
        state = self._ctx.resume_state()
        return state if state is not None and state.group == self.index else None

    # the rest is the run's ------------------------------------------------------------
    def log_table(self, name: str, frame: pd.DataFrame, *, part: str | int = "all", csv: bool = False) -> None:
        self._ctx.log_table(name, frame, part=part, csv=csv)

    def should_checkpoint(self, step: int) -> bool:
        return self._ctx.should_checkpoint(step)

    def stop_requested(self) -> bool:
        return self._ctx.stop_requested()

    def note(self, key: str, value: Any) -> None:
        self._ctx.note(key, value)

    def save_snapshot(self, name: str, tensors: Mapping[str, torch.Tensor], meta: Mapping[str, Any] | None = None) -> Any:
        return self._ctx.save_snapshot(name, tensors, meta)

    def progress(self, total: int, description: str = "training",
                 start: int | None = None) -> AbstractContextManager[Callable[..., None]]:
        return self._ctx.progress(total, description, start=start)

    def __getattr__(self, attr: str) -> Any:  # anything else a particular context offers (paths, records, ...)
        if attr == "_ctx":  # not set yet (copy, unpickling): no recursion
            raise AttributeError(attr)
        return getattr(self._ctx, attr)


__all__ = ["GroupContext", "resumed_group", "run_groups"]
