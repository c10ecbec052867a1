"""How the lab trains: gradient descent on the population loss, all seeds in one batched
update, behind the engine's :class:`~stagewise.engine.driver.TrainingDriver`. The driver
owns the bookkeeping (resume, logging cadence, finite checks, checkpoints, stop requests);
:class:`ModeLoop` owns the update and the metrics only.

Step t (1-based) uses the learning rate of step t (:func:`learning_rate`); step 0 is the
initialisation; the metrics of step t describe the weights after t updates:
``W2W1.mode_strength.{i}`` (a_i of mode i, i = 0 .. r-1) and ``train.loss``, each (S,).

A run trains groups one after another (:func:`run`, on :func:`stagewise.runs.groups.run_groups`):
group 0 is the config itself (records without a variant), then each control of
``config.controls`` (records under ``variant=NAME``, metric names ``NAME/...``).
"""

from __future__ import annotations

from typing import Any

import torch

from stagewise.engine import resolve_device, schedules
from stagewise.engine.driver import StepOutput, TrainingDriver
from stagewise.engine.perf import training_threads
from stagewise.labs.contract import RunContext, RunResult
from stagewise.runs.groups import GroupContext, run_groups

from .config import Config, TrainConfig, control_config
from .data import build_target
from .model import gradients, init_weights, loss, mode_strengths, residual


def learning_rate(train: TrainConfig, step: int) -> float:
    """The rate of update ``step`` (1-based): ``train.schedule`` on :mod:`stagewise.engine.schedules`."""
    if train.schedule == "warmup" and step <= train.warmup_steps:
        return schedules.linear_warmup(step, train.warmup_steps, train.lr)
    return schedules.constant(step, train.lr)


class ModeLoop:
    """One group's gradient descent as the driver's :class:`~stagewise.engine.driver.Loop`:
    W1 (S, h, d_in), W2 (S, d_out, h) in float64, checkpointed as they are."""

    def __init__(self, config: Config, seeds: list[int], device: torch.device):
        self.config, self.device = config, device
        target = build_target(config, seeds)
        self.W1, self.W2 = (w.to(device) for w in init_weights(config, seeds, target))
        self.target = target.to(device)

    def logged(self, t: int) -> bool:
        """Metrics every ``train.log_every`` steps and at the last."""
        return t % self.config.train.log_every == 0 or t == self.config.train.steps

    def step(self, t: int, log: bool) -> StepOutput:
        if t > 0:  # both layers from the same residual: simultaneous gradient descent
            grad_W1, grad_W2 = gradients(self.W1, self.W2, residual(self.W1, self.W2, self.target))
            lr = learning_rate(self.config.train, t)
            self.W1, self.W2 = self.W1 - lr * grad_W1, self.W2 - lr * grad_W2
        if not log:
            return StepOutput()
        values = self.metrics()
        return StepOutput(values, losses={"train.loss": values["train.loss"]})

    def metrics(self) -> dict[str, torch.Tensor]:
        """``train.loss`` and ``W2W1.mode_strength.{i}`` of the current weights, each (S,)."""
        strengths = mode_strengths(self.W1, self.W2, self.target)  # (S, r)
        values = {"train.loss": loss(residual(self.W1, self.W2, self.target))}
        values.update({f"W2W1.mode_strength.{i}": strengths[:, i] for i in range(strengths.shape[1])})
        return values

    def weights(self) -> dict[str, torch.Tensor]:
        return {"W1": self.W1, "W2": self.W2}

    def state(self) -> dict[str, torch.Tensor]:
        return {"W1": self.W1.contiguous(), "W2": self.W2.contiguous()}

    def meta(self, t: int) -> dict[str, Any]:
        return {"step": t}

    def restore(self, checkpoint: Any) -> int:
        self.W1 = checkpoint.tensors["W1"].to(self.device, torch.float64)
        self.W2 = checkpoint.tensors["W2"].to(self.device, torch.float64)
        return int(checkpoint.step)


def groups(config: Config) -> list[tuple[str, Config]]:
    """(variant, config) of every group of a run, in training order: the run, then its controls."""
    return [("", config), *((name, control_config(config, name)) for name in config.controls)]


def train_group(index: int, variant: str, config: Config, ctx: RunContext) -> ModeLoop:
    """Train group ``index`` through the driver, as one group of the run (its records under
    ``variant``, its checkpoints tagged with ``index``); returns the trained loop."""
    loop = ModeLoop(config, list(ctx.seeds), resolve_device(config.device))
    records = GroupContext(ctx, index, variant, meta={"variant": variant})
    driver = TrainingDriver(records, list(ctx.seeds), config.train.steps, loop.logged, variant or "main")
    threads = 1 if config.train.threads == "auto" else int(config.train.threads)  # tiny matrices: dispatch-bound
    with training_threads(threads):
        driver.run(loop)
    return loop


def run(config: Config, ctx: RunContext) -> RunResult:
    """Train every group in order, skipping those a resumed run had finished."""
    plan = groups(config)
    run_groups(ctx, plan, lambda index, group: train_group(index, group[0], group[1], ctx))
    return RunResult({"seeds": list(ctx.seeds), "groups": [variant for variant, _ in plan]})
