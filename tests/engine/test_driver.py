"""The shared training driver (stagewise.engine.driver): logging cadence, checkpoints,
stop requests, finite checks and resume, on a toy loop and on the disentangled updates.

Ground truth: resume == uninterrupted run (bit for bit), the cadence predicates, and the
contract that no checkpoint holds non-finite weights."""

from __future__ import annotations

import math

import pytest
import torch

from stagewise.config import deep_merge, resolve
from stagewise.engine import Diverged, check_finite
from stagewise.engine.driver import StepOutput, TrainingDriver
from stagewise.labs.disentangled.config import Config as DisConfig
from stagewise.labs.disentangled.train import State, UpdateLoop, build_ensemble, init_weights, members_from_config, run_training
from stagewise.runs.context import Checkpoint, Interrupted

SEEDS = [3, 4, 5]
TOTAL = 23


class Recorder:
    """A run context in memory: records, checkpoints (cloned), an optional stop request at a step."""

    def __init__(self, every: int = 5, resume: Checkpoint | None = None, stop_at: int | None = None):
        self.every, self.resume, self.stop_at = every, resume, stop_at
        self.records: dict[int, dict[str, torch.Tensor]] = {}
        self.checkpoints: dict[int, tuple[dict[str, torch.Tensor], dict]] = {}
        self.events: list[tuple[str, int]] = []
        self.stopped, self.polls = False, 0

    def log(self, step, values, *, variant=""):
        self.events.append(("log", step))
        self.records.setdefault(step, {}).update({k: v.clone() for k, v in values.items()})

    def stop_requested(self):
        self.polls += 1
        return self.stopped

    def should_checkpoint(self, step):
        return self.stopped or step % self.every == 0

    def save_checkpoint(self, step, tensors, meta=None, *, group=0):
        self.events.append(("checkpoint", step))
        self.checkpoints[step] = ({k: v.clone() for k, v in tensors.items()}, dict(meta or {}))
        if self.stopped:
            raise Interrupted()

    def resume_state(self):
        return self.resume

    def progress(self, total, description="training", start=None):
        from contextlib import contextmanager

        @contextmanager
        def bar():
            def advance(n=1):
                self.events.append(("advance", n))
                if self.stop_at is not None and len([e for e in self.events if e[0] == "advance"]) == self.stop_at:
                    self.stopped = True
            yield advance
        return bar()


class RandomWalk:
    """A toy loop: w_t = w_{t-1} + noise(t) per member, a Generator in the checkpoint; optional
    NaN in the loss (``nan_loss_at``), the guard (``nan_guard_at``) or the weights (``nan_weights_at``)."""

    def __init__(self, nan_loss_at=None, nan_guard_at=None, nan_weights_at=None):
        self.w = torch.zeros(len(SEEDS), 2, dtype=torch.float64)  # (S, 2)
        self.gen = torch.Generator().manual_seed(11)
        self.nan_loss_at, self.nan_guard_at, self.nan_weights_at = nan_loss_at, nan_guard_at, nan_weights_at
        self.updates: list[int] = []
        self.deferred_calls = 0

    def step(self, t, log):
        if t > 0:
            self.w = self.w + torch.randn(self.w.shape, generator=self.gen, dtype=torch.float64)
            self.updates.append(t)
            if t == self.nan_weights_at:
                self.w[1, 0] = math.nan
        loss = self.w.square().sum(-1)  # (S,)
        if t == self.nan_loss_at:
            loss = loss.clone()
            loss[2] = math.inf
        guard = {"guard": torch.full((len(SEEDS),), math.nan if t == self.nan_guard_at else 0.0)}
        if not log:
            return StepOutput(guard=guard)
        return StepOutput({"loss": loss, "w0": self.w[:, 0]}, losses={"loss": loss}, guard=guard)

    def weights(self):
        return {"w": self.w}

    def state(self):
        return {"w": self.w, "rng": self.gen.get_state()}

    def meta(self, t):
        return {"step": t}

    def restore(self, checkpoint):
        self.w = checkpoint.tensors["w"].clone()
        self.gen.set_state(checkpoint.tensors["rng"].clone())
        return checkpoint.step


def logged(t: int) -> bool:
    return t % 4 == 0 or t in (0, 1, TOTAL)  # an every-k cadence with first and last steps


def driver(ctx, **kw) -> TrainingDriver:
    return TrainingDriver(ctx, SEEDS, TOTAL, logged, "toy", **kw)


def test_cadence_logging_and_checkpoints():
    ctx, checks = Recorder(every=5), []

    def spy(step, seeds, values=None, weights=None):
        checks.append((step, values is not None, weights is not None))
        check_finite(step, seeds, values, weights)

    loop = RandomWalk()
    assert driver(ctx, check=spy).run(loop) == TOTAL
    assert sorted(ctx.records) == [t for t in range(TOTAL + 1) if logged(t)]
    assert sorted(ctx.checkpoints) == [5, 10, 15, 20, TOTAL]  # the interval and the last step, never step 0
    assert loop.updates == list(range(1, TOTAL + 1))
    weight_checks = {step for step, _, has_weights in checks if has_weights}
    assert set(ctx.checkpoints) <= weight_checks  # no checkpoint without a weight check at its step
    assert {t for t in range(TOTAL + 1) if logged(t)} <= weight_checks
    assert all(has_values for step, has_values, has_weights in checks if not has_weights)  # the guard
    for step, (tensors, meta) in ctx.checkpoints.items():
        assert meta == {"step": step}
        if step in ctx.records:  # the checkpoint holds the state its step's record describes
            assert torch.equal(tensors["w"][:, 0], ctx.records[step]["w0"])


@pytest.mark.parametrize("at", [5, 10, 20])
def test_resume_equals_uninterrupted(at):
    full, loop = Recorder(every=5), RandomWalk()
    driver(full).run(loop)
    tensors, meta = full.checkpoints[at]
    resumed_ctx, resumed = Recorder(every=5, resume=Checkpoint(at, tensors, meta)), RandomWalk()
    driver(resumed_ctx).run(resumed)
    assert resumed.updates == list(range(at + 1, TOTAL + 1))
    assert torch.equal(resumed.w, loop.w)
    tail = {t: v for t, v in full.records.items() if t > at}  # the resumed step itself is not logged again
    assert resumed_ctx.records.keys() == tail.keys()
    for t in tail:
        assert all(torch.equal(resumed_ctx.records[t][k], tail[t][k]) for k in tail[t])
    assert sorted(resumed_ctx.checkpoints) == [s for s in full.checkpoints if s > at]


def test_stop_request_saves_then_interrupts_at_the_next_step():
    ctx, loop = Recorder(every=100, stop_at=7), RandomWalk()  # the request arrives during step 7
    with pytest.raises(Interrupted):
        driver(ctx).run(loop)
    assert loop.updates == list(range(1, 8))
    assert list(ctx.checkpoints) == [7] and ctx.events[-1] == ("checkpoint", 7)
    tensors, meta = ctx.checkpoints[7]
    resumed_ctx, resumed = Recorder(every=100, resume=Checkpoint(7, tensors, meta)), RandomWalk()
    driver(resumed_ctx).run(resumed)
    reference = RandomWalk()
    driver(Recorder(every=100)).run(reference)
    assert torch.equal(resumed.w, reference.w)


def test_custom_checkpoint_rule_polls_stop_once_per_step():
    ctx = Recorder(every=5)
    driver(ctx, checkpoint_due=lambda t: ctx.stop_requested() or t == 12).run(RandomWalk())
    assert list(ctx.checkpoints) == [12] and ctx.polls == TOTAL


def test_nonfinite_loss_raises_after_its_record():
    ctx = Recorder()
    with pytest.raises(Diverged) as err:
        driver(ctx).run(RandomWalk(nan_loss_at=8))
    assert (err.value.step, err.value.seed) == (8, SEEDS[2]) and "loss" in err.value.what
    assert max(ctx.records) == 8 and math.isinf(ctx.records[8]["loss"][2])  # the diverged record is kept
    assert 10 not in ctx.checkpoints


def test_nonfinite_guard_raises_before_anything_is_logged():
    ctx = Recorder()
    with pytest.raises(Diverged) as err:
        driver(ctx).run(RandomWalk(nan_guard_at=8))
    assert err.value.step == 8 and err.value.seed == SEEDS[0] and "guard" in err.value.what
    assert logged(8) and 8 not in ctx.records and max(ctx.records) == 4  # step 8 is a logged step: not logged


def test_nonfinite_weights_never_reach_a_checkpoint():
    ctx = Recorder(every=5)
    with pytest.raises(Diverged) as err:
        driver(ctx).run(RandomWalk(nan_weights_at=9))  # not a logged step: caught before the checkpoint at 10
    assert (err.value.step, err.value.seed) == (10, SEEDS[1]) and "weights w" in err.value.what
    assert sorted(ctx.checkpoints) == [5]


def test_weights_every_step_logs_the_diverged_evaluation_and_skips_deferred_metrics():
    class Deferred(RandomWalk):
        def step(self, t, log):
            out = super().step(t, log)

            def measure():
                self.deferred_calls += 1
                return StepOutput(out.values, out.losses)
            return StepOutput(guard=out.guard, deferred=measure)

        def diverged(self, t):
            return {"diverged_at": torch.full((len(SEEDS),), float(t))}

    ctx, loop = Recorder(every=100), Deferred(nan_weights_at=6)
    with pytest.raises(Diverged) as err:
        driver(ctx, weights_every_step=True).run(loop)
    assert err.value.step == 6
    assert torch.equal(ctx.records[6]["diverged_at"], torch.full((3,), 6.0))
    assert "loss" not in ctx.records[6] and loop.deferred_calls == 6  # steps 0..5 measured, not step 6


def test_without_context_only_the_updates_run():
    loop = RandomWalk(nan_loss_at=3)  # nothing is checked either
    assert TrainingDriver(None, SEEDS, TOTAL, logged).run(loop) == TOTAL
    assert loop.updates == list(range(1, TOTAL + 1))


# --------------------------------------------------------------------------- disentangled
TINY = {"n_seeds": 2, "data": {"d": 4, "prompt_len": 5, "n_train": 24, "n_test": 20},
        "train": {"steps": 18, "t1": 7, "log_every": 3, "spectrum_every": 6, "optimizer": "sgd", "batch_size": 8, "noise": 0.05}}


def test_disentangled_updates_resume_through_the_driver_bit_for_bit():
    """UpdateLoop's state/restore carry weights, moments and the minibatch and noise streams."""
    config = resolve(DisConfig, deep_merge(TINY, {}))
    members = members_from_config(config)

    def fresh() -> UpdateLoop:
        ens = build_ensemble(config, members)
        return UpdateLoop(ens, State(list(init_weights(config, members, torch.float64))), prefix="g0.")

    reference = fresh()
    run_training(reference.ens, reference.current, config.train.steps, lambda t, s: None)
    seeds = [m.seed for m in members]
    ctx = Recorder(every=5)
    first = fresh()
    TrainingDriver(ctx, seeds, config.train.steps, lambda t: False).run(first)
    assert all(torch.equal(a, b) for a, b in zip(first.current.weights, reference.current.weights))
    tensors, meta = ctx.checkpoints[10]
    assert all(k.startswith("g0.") for k in tensors)
    resumed = fresh()
    resumed_ctx = Recorder(every=5, resume=Checkpoint(10, tensors, meta))
    TrainingDriver(resumed_ctx, seeds, config.train.steps, lambda t: False).run(resumed)
    assert resumed.current.step == config.train.steps
    assert all(torch.equal(a, b) for a, b in zip(resumed.current.weights, reference.current.weights))
