"""Groups of trainings in one run (stagewise.runs.groups): records tagged by variant (one name,
or one per member splitting (M,) vectors), checkpoints with the group index and the group's
metadata, resume only inside the checkpoint's group, and run_groups skipping finished groups;
a run killed inside a group resumes to the records of the uninterrupted run (in memory)."""

from __future__ import annotations

from typing import Any

import pandas as pd
import torch

from stagewise.engine.driver import StepOutput, TrainingDriver
from stagewise.runs import Checkpoint, GroupContext, MemoryContext, resumed_group, run_groups


class RecordingContext(MemoryContext):
    """A MemoryContext that keeps every log call in order, saves checkpoints in memory (each with
    the number of log calls it covers, as a run directory's covers its stream) and resumes from
    ``resume``."""

    def __init__(self, seeds: list[int], checkpoint_every: int = 0, resume: Checkpoint | None = None,
                 calls: list[tuple[int, str, dict[str, list[float]]]] | None = None):
        super().__init__(seeds)
        self.checkpoint_every, self.resume = checkpoint_every, resume
        self.calls = list(calls or [])
        self.saved: list[tuple[Checkpoint, int]] = []

    def log(self, step: int, values, *, variant: str = "") -> None:
        super().log(step, values, variant=variant)
        self.calls.append((step, variant, {k: v.tolist() for k, v in values.items()}))

    def should_checkpoint(self, step: int) -> bool:
        return self.checkpoint_every > 0 and step % self.checkpoint_every == 0

    def save_checkpoint(self, step, tensors, meta=None, *, group: int = 0) -> None:
        state = Checkpoint(step, {k: v.clone() for k, v in tensors.items()}, meta, group)
        self.saved.append((state, len(self.calls)))

    def resume_state(self) -> Checkpoint | None:
        return self.resume


def test_a_fixed_variant_tags_every_record():
    ctx = RecordingContext([0, 1])
    GroupContext(ctx, 1, "adam").log(3, {"loss": torch.tensor([1.0, 2.0])}, variant="ignored")
    assert ctx.calls == [(3, "adam", {"loss": [1.0, 2.0]})]
    assert ctx.records[3]["adam/loss"].tolist() == [1.0, 2.0]


def test_member_variants_split_member_vectors_into_one_record_per_variant():
    ctx = RecordingContext([0, 1])
    variants = ["base", "no-noise", "base", "no-noise", "base|control"]  # seed-major members and a control
    group = GroupContext(ctx, 0, variants)
    group.log(7, {"x": torch.tensor([0.0, 1.0, 2.0, 3.0, 4.0]), "y": torch.tensor([5.0, 6.0, 7.0, 8.0, 9.0])})
    # variants in the order they first appear, each with its members' entries in member order
    assert ctx.calls == [(7, "base", {"x": [0.0, 2.0], "y": [5.0, 7.0]}),
                         (7, "no-noise", {"x": [1.0, 3.0], "y": [6.0, 8.0]}),
                         (7, "base|control", {"x": [4.0], "y": [9.0]})]


def test_checkpoints_carry_the_group_index_and_the_group_meta():
    ctx = RecordingContext([0])
    GroupContext(ctx, 2, "adamw", meta={"variant": "adamw"}).save_checkpoint(5, {"w": torch.ones(1)}, {"stage": 1}, group=0)
    (state, _), = ctx.saved
    assert state.group == 2 and state.step == 5
    assert list(state.meta.items()) == [("stage", 1), ("variant", "adamw")]  # the loop's entries first
    GroupContext(ctx, 3, ["a", "b"]).save_checkpoint(6, {"w": torch.ones(2)}, {"group": 3, "step": 6})
    assert ctx.saved[-1][0].group == 3 and ctx.saved[-1][0].meta == {"group": 3, "step": 6}  # no extras: as given
    GroupContext(ctx, 4).save_checkpoint(7, {"w": torch.ones(1)})
    assert ctx.saved[-1][0].meta is None


def test_resume_only_inside_the_checkpoints_group():
    resume = Checkpoint(step=4, tensors={}, meta={}, group=1)
    ctx = RecordingContext([0], resume=resume)
    assert resumed_group(ctx) == 1 and resumed_group(RecordingContext([0])) == 0
    assert GroupContext(ctx, 1, "b").resume_state() is resume
    assert GroupContext(ctx, 0, "a").resume_state() is None and GroupContext(ctx, 2, "c").resume_state() is None


def test_the_rest_goes_to_the_run_context():
    ctx = RecordingContext([3, 4], checkpoint_every=2)
    group = GroupContext(ctx, 1, "v")
    group.log_table("stages", pd.DataFrame({"a": [1]}), part="v")
    group.note("fact", 1)
    assert ctx.names() == ["stages"] and ctx.notes == {"fact": 1}
    assert group.should_checkpoint(4) and not group.should_checkpoint(3) and not group.stop_requested()
    assert group.seeds == [3, 4] and group.records is ctx.records  # what only this context has


def test_run_groups_skips_the_groups_finished_before_the_resumed_one():
    trained: list[int] = []

    def train(index: int, name: str) -> str:
        trained.append(index)
        return name.upper()

    assert run_groups(RecordingContext([0]), ["a", "b", "c"], train) == ["A", "B", "C"] and trained == [0, 1, 2]
    trained.clear()
    resumed = RecordingContext([0], resume=Checkpoint(step=2, tensors={}, meta={}, group=1))
    assert run_groups(resumed, ["a", "b", "c"], train) == [None, "B", "C"] and trained == [1, 2]


class HalvingLoop:
    """x <- x / 2 + rate * t per member, x (S,) from 1; every step logged (a toy training)."""

    def __init__(self, size: int, rate: float):
        self.x, self.rate = torch.ones(size, dtype=torch.float64), rate

    def step(self, t: int, log: bool) -> StepOutput:
        if t > 0:
            self.x = self.x / 2 + self.rate * t
        return StepOutput({"x": self.x.clone()})

    def weights(self) -> dict[str, torch.Tensor]:
        return {"x": self.x}

    def state(self) -> dict[str, torch.Tensor]:
        return {"x": self.x.clone()}

    def meta(self, t: int) -> dict[str, Any]:
        return {"step": t}

    def restore(self, checkpoint: Any) -> int:
        self.x = checkpoint.tensors["x"].clone()
        return checkpoint.step


GROUPS = [("fixed", 2, 0.5), (["a", "b", "a", "b"], 4, 0.25)]  # (variant(s), members, rate)
STEPS = 9


def _train_all(ctx: RecordingContext) -> list[int]:
    """Both groups through run_groups and the engine's driver; returns the groups trained."""
    trained = []

    def train(index: int, spec: tuple) -> None:
        variant, size, rate = spec
        trained.append(index)
        group = GroupContext(ctx, index, variant, meta={"name": f"g{index}"})
        TrainingDriver(group, list(range(size)), STEPS, lambda t: True).run(HalvingLoop(size, rate))

    run_groups(ctx, GROUPS, train)
    return trained


def test_a_run_killed_inside_a_group_resumes_to_the_uninterrupted_records():
    full = RecordingContext([0, 1], checkpoint_every=4)
    assert _train_all(full) == [0, 1]
    assert [(s.group, s.step) for s, _ in full.saved] == [(0, 4), (0, 8), (0, 9), (1, 4), (1, 8), (1, 9)]
    assert all(s.meta == {"step": s.step, "name": f"g{s.group}"} for s, _ in full.saved)
    for state, covered in full.saved[3:5]:  # killed after a checkpoint inside the second group
        resumed = RecordingContext([0, 1], checkpoint_every=4, resume=state, calls=full.calls[:covered])
        assert _train_all(resumed) == [1]  # the first group is finished: skipped
        assert resumed.calls == full.calls
        assert [(s.group, s.step) for s, _ in resumed.saved] == [(s.group, s.step) for s, _ in full.saved if s.step > state.step
                                                                  and s.group == 1]
