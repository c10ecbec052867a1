"""One step-loop driver for every training loop: the lab owns the update, the driver owns
the bookkeeping (resume hand-off, progress bar, logging cadence, finite checks,
checkpoints and stop requests).

Step ``t`` is the state after ``t`` updates (step 0 is the initialization). With a run
context ``ctx`` (duck-typed: ``log``, ``should_checkpoint``, ``stop_requested``,
``save_checkpoint``, ``resume_state``, ``progress``), :meth:`TrainingDriver.run` does::

    start = loop.restore(ctx.resume_state())     # resumed: the checkpoint's step
    fresh:  out = loop.step(0, logged(0)); record(0, out)
    for t in start+1 .. total:
        out = loop.step(t, logged(t))            # update t, then the metrics at t when asked
        record(t, out); advance(1); loop.after(t)
        if checkpoint_due(t): check weights (unless checked at t); save_checkpoint(t, loop.state(), loop.meta(t))

where ``record(t, out)`` is: the guard values finite (else :class:`~stagewise.engine.finite.Diverged`
before anything of step t is kept), ``ctx.log(t, out.values)``, and at a logged step the
losses and ``loop.weights()`` finite (the diverged record is kept; with ``weights_every_step``
the weights are checked at every step, before the record). A stop request makes
``checkpoint_due`` true at the next step; ``save_checkpoint`` then raises ``Interrupted``
after saving. Without a context nothing is logged, checked or saved: only the updates run.
The resumed step itself is neither logged nor saved again (resume == uninterrupted).
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import torch

from .finite import Diverged, check_finite

FinalCheck = Callable[..., None]  # check_finite's signature: (step, seeds, values, weights)


@dataclass(frozen=True, eq=False)
class StepOutput:
    """What one step of a loop hands the driver.

    Attributes:
        values: metrics to log at this step, each (S,) (None: nothing to log).
        losses: values that must be finite at a logged step, checked with the weights after
            ``values`` are logged (the record of a diverged step is kept), each (S, ...).
        guard: values that must be finite before anything of this step is logged (e.g. the
            training loss of the update itself), each (S, ...).
        deferred: the step's metrics computed only once its weights passed the
            ``weights_every_step`` check (metrics that cannot run on non-finite weights,
            e.g. spectra); its output replaces ``values`` and ``losses``.
    """

    values: Mapping[str, torch.Tensor] | None = None
    losses: Mapping[str, torch.Tensor | None] | None = None
    guard: Mapping[str, torch.Tensor | None] | None = None
    deferred: Callable[[], StepOutput] | None = None


class Loop(Protocol):
    """What a lab supplies: the update and its state, nothing of the run store."""

    def step(self, t: int, log: bool) -> StepOutput:
        """Step 0: the initialization (no update); t >= 1: update number t. The metrics of
        the state after t updates go in ``values`` when ``log`` (or when the lab logs more
        often than the driver's cadence, e.g. spectra)."""

    def weights(self) -> Mapping[str, torch.Tensor]:
        """The trainable tensors, each with a leading member axis (S, ...), for the finite check."""

    def state(self) -> dict[str, torch.Tensor]:
        """The checkpoint tensors of the current state."""

    def meta(self, t: int) -> dict[str, Any]:
        """The checkpoint's JSON-able record at step t."""

    def restore(self, checkpoint: Any) -> int:
        """Load a checkpoint's state (``checkpoint.tensors``, ``.meta``, ``.step``); returns its step."""

    def after(self, t: int) -> None:
        """Optional. Lab work after step t's record and before its checkpoint (evaluations, snapshots)."""

    def diverged(self, t: int) -> Mapping[str, torch.Tensor] | None:
        """Optional. Values to log at step t when its weights are not finite (``weights_every_step``)."""


@dataclass(frozen=True)
class TrainingDriver:
    """The bookkeeping of one training loop over ``total`` steps (see the module docstring).

    Attributes:
        ctx: the run context (None: no logging, no checks, no checkpoints).
        seeds: the members' seeds, in ensemble order (S,) (named when a check fails).
        total: the last step.
        logged: which steps are logged (their weights are checked too).
        description: the progress bar's label.
        checkpoint_due: which steps save a checkpoint (default: ``ctx.should_checkpoint(t) or t == total``).
        check: the finite check (default :func:`~stagewise.engine.finite.check_finite`).
        progress: a progress bar yielding ``advance(n=1)`` (default: ``ctx.progress(total, description, start)``).
        weights_every_step: check the weights at every step, not only at logged ones (one
            reduction per tensor and one synchronization); on failure the loop's optional
            ``diverged(t)`` values (the diverged step's evaluation) are logged before raising.
    """

    ctx: Any
    seeds: Sequence[int]
    total: int
    logged: Callable[[int], bool]
    description: str = "training"
    checkpoint_due: Callable[[int], bool] | None = None
    check: FinalCheck = check_finite
    progress: AbstractContextManager[Callable[..., None]] | None = None
    weights_every_step: bool = False

    def due(self, t: int) -> bool:
        """True when step t saves a checkpoint."""
        if self.ctx is None:
            return False
        if self.checkpoint_due is not None:
            return self.checkpoint_due(t)
        return self.ctx.should_checkpoint(t) or t == self.total

    def start(self, loop: Loop) -> int:
        """The step the loop continues from: the resumed checkpoint's (its state loaded) or 0."""
        resumed = self.ctx.resume_state() if self.ctx is not None else None
        return 0 if resumed is None else loop.restore(resumed)

    def record(self, t: int, out: StepOutput, loop: Loop, log: bool) -> bool:
        """Check and log step t's output; returns whether the weights were checked."""
        if self.ctx is None:
            return False
        if out.guard is not None:
            self.check(t, self.seeds, out.guard, None)
        if self.weights_every_step:
            try:
                self.check(t, self.seeds, None, loop.weights())
            except Diverged:
                last = getattr(loop, "diverged", None)
                values = last(t) if last is not None else None
                if values is not None:  # the record of the diverged step
                    self.ctx.log(t, values)
                raise
        if out.deferred is not None:
            out = out.deferred()
        if out.values is not None:
            self.ctx.log(t, out.values)
        if log and out.values is not None:
            self.check(t, self.seeds, out.losses, None if self.weights_every_step else loop.weights())
            return True
        return self.weights_every_step

    def run(self, loop: Loop, start: int | None = None) -> int:
        """Drive ``loop`` from ``start`` (default: :meth:`start`) to ``total``; returns the last step."""
        start = self.start(loop) if start is None else start
        ctx = self.ctx
        logged = (lambda t: False) if ctx is None else self.logged
        bar = self.progress
        if bar is None:
            bar = ctx.progress(self.total, self.description, start=start) if ctx is not None else nullcontext(lambda n=1: None)
        after = getattr(loop, "after", None)
        with bar as advance:
            if start == 0:
                self.record(0, loop.step(0, logged(0)), loop, logged(0))
            for t in range(start + 1, self.total + 1):
                log = logged(t)
                checked = self.record(t, loop.step(t, log), loop, log)
                advance(1)
                if after is not None:
                    after(t)
                if self.due(t):
                    if not checked:  # no checkpoint holds non-finite weights
                        self.check(t, self.seeds, None, loop.weights())
                    ctx.save_checkpoint(t, loop.state(), loop.meta(t))
        return self.total
