"""The disentangled lab's batched training equals its reference loop (labs/disentangled/reference.py),
seed by seed: weights and logged training losses at the end of each stage (t1 and the last step)."""

from __future__ import annotations

import pytest

from stagewise.config import deep_merge, resolve
from stagewise.errors import UserError
from stagewise.labs import get_lab
from stagewise.labs.disentangled.config import Config
from stagewise.labs.disentangled.reference import ReferenceRun, train_reference

from reference_helpers import StageEndContext

WEIGHT_ATOL = 1e-10
"""Max abs difference of W and V. Both run in float64 (eps 2.2e-16); the trainer contracts
the prompts in batched einsums (members sharing a dataset in one product) and takes closed-form
gradients, the reference uses autograd per seed, so sums run in different orders. Stable GD
(lr_stage1 = 1 on a loss of small curvature) does not amplify that round-off over a few dozen
steps: measured <= 3e-15 here. A ReLU gate flipped by round-off would be the one way to drift
further, and would deserve a look. A relative change of 1e-6 in a learning rate moves the
weights by ~1e-8."""
LOSS_ATOL = 1e-12
"""Max abs difference of the logged training losses (values ~0.5-0.7; measured <= 1e-16)."""

T1, STEPS = 30, 60  # the default preset cut short: 30 large-rate steps, 30 annealed ones
SMALL = {"n_seeds": 2, "data": {"n_test": 200}, "train": {"t1": T1, "steps": STEPS, "log_every": T1, "spectrum_every": STEPS},
         "experiment": {"floors": False}}
"""The two-stage preset (d 30, L 20, N 400, controls on) cut short; few test prompts (the
reference sees the training prompts only), no floors table."""
LOSSES = {"train.loss": "loss", "train.loss_l2": "loss_l2", "train.K1": "k1", "train.K2": "k2"}
"""Logged metric -> the reference's :class:`~stagewise.labs.disentangled.reference.Losses` field."""

LAB = get_lab("disentangled")


def small(**extra) -> Config:
    return resolve(Config, deep_merge(SMALL, extra))


@pytest.fixture(scope="module")
def two_stage():
    """(config, context) of the lab's run of the two-stage experiment: 2 seeds and their controls."""
    config = small()
    ctx = StageEndContext(config.seed_list(), [T1, STEPS])
    LAB.run(config, ctx)
    return config, ctx


def mismatches(ctx: StageEndContext, member: int, ref: ReferenceRun, variant: str = "") -> list[str]:
    """What of ``member`` (its index in the variant's records, and in the checkpoint when the
    variant is the run's only group's first) differs from ``ref`` beyond the tolerances."""
    out, prefix = [], f"{variant}/" if variant else ""
    for end in ref.stages:
        logged = ctx.records[end.step]
        for metric, field in LOSSES.items():
            gap = abs(logged[prefix + metric][member].item() - getattr(end.losses, field))
            if not gap <= LOSS_ATOL:
                out.append(f"step {end.step} {prefix}{metric}: {gap:.2e}")
        if variant:  # weights by their logged norms (the checkpoint's member order is the group's)
            pairs = (("W.fro", end.w.norm()), ("V.fro", end.v.norm()))
            gaps = {name: abs(logged[prefix + name][member].item() - float(value)) for name, value in pairs}
        else:  # the two-stage group: seeds first, then their controls
            saved = ctx.saved[end.step]
            gaps = {"W": (saved["g0.w.0"][member] - end.w).abs().max().item(),
                    "V": (saved["g0.w.1"][member] - end.v).abs().max().item()}
        out.extend(f"step {end.step} {prefix}{name}: {gap:.2e}" for name, gap in gaps.items() if not gap <= WEIGHT_ATOL)
    return out


def test_lab_run_equals_the_reference_per_seed(two_stage):
    config, ctx = two_stage
    assert ctx.saved[T1]["g0.w.0"].shape[0] == 2 * config.n_seeds  # seeds, then their shuffled-label controls
    for member, seed in enumerate(config.seed_list()):
        ref = train_reference(config, seed)
        assert [end.step for end in ref.stages] == [T1, STEPS]
        assert mismatches(ctx, member, ref) == [], f"seed {seed}"


@pytest.mark.parametrize("rate", ["lr_stage1", "lr_stage2"])
def test_a_perturbed_learning_rate_is_caught(two_stage, rate):
    """The tolerances are tight enough to see a 1e-6 relative change of either learning rate."""
    config, ctx = two_stage
    nudged = small(train={rate: getattr(config.train, rate) * (1 + 1e-6)})
    assert mismatches(ctx, 0, train_reference(nudged, config.seed)) != []


def test_ablations_share_data_and_each_equals_its_reference():
    """kind=ablations trains each seed's variants and controls over one copy of its prompts;
    every variant still equals the reference under that variant's settings."""
    variants = {"baseline": {}, "no-anneal": {"lr_stage2": 1.0}, "no-noise": {"noise": 0.0}}
    config = small(n_seeds=1, experiment={"kind": "ablations", "ablations": ["no-anneal", "no-noise"]},
                   data={"n_train": 100})
    ctx = StageEndContext(config.seed_list(), [])
    LAB.run(config, ctx)
    for name, train in variants.items():
        ref = train_reference(small(n_seeds=1, data={"n_train": 100}, train=train), config.seed)
        assert mismatches(ctx, 0, ref, variant=name) == [], name


def test_the_reference_names_the_options_it_does_not_cover():
    with pytest.raises(UserError, match="got train.optimizer=adam, model.output=joint"):
        train_reference(small(model={"output": "joint"}, train={"optimizer": "adam"}), 0)
