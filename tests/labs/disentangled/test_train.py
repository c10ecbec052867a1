"""The disentangled lab: closed-form gradients, batched == loop, schedules, resume across
groups, bad input, divergence, claims from metrics."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pandas as pd
import pytest
import torch

from stagewise.config import deep_merge, resolve
from stagewise.labs import get_lab
from stagewise.labs.disentangled.claims import STAGED
from stagewise.labs.disentangled.config import Config
from stagewise.labs.disentangled.model import forward, gradients, logistic
from stagewise.labs.disentangled.train import (
    Member, State, build_ensemble, init_weights, learning_rate, members_from_config, run_training,
)
from stagewise.engine import Diverged
from stagewise.orchestrate import execute, prepare

from resume_helpers import crash_then_resume

LAB = get_lab("disentangled")
TINY = {"n_seeds": 2, "data": {"d": 6, "prompt_len": 6, "n_train": 40, "n_test": 60},
        "train": {"steps": 40, "t1": 15, "log_every": 5, "spectrum_every": 10, "checkpoint_every": 7}}


def tiny(**extra) -> Config:
    return resolve(Config, deep_merge(TINY, extra))


@pytest.mark.parametrize("output,weights", [("split", "block"), ("joint", "block"), ("joint", "full")])
@pytest.mark.parametrize("normalizer", ["L", "L-1", "sum"])
@pytest.mark.parametrize("minibatch", [False, True])
def test_gradients_match_autograd(output, weights, normalizer, minibatch):
    config = tiny(model={"output": output, "weights": weights, "normalizer": normalizer, "init_scale": 0.5})
    members = members_from_config(config)
    ens = build_ensemble(config, members)
    mats = [w.clone().requires_grad_(True) for w in init_weights(config, members, torch.float64)]
    weight = None
    if minibatch:
        weight = torch.zeros(len(members), config.data.n_train, dtype=torch.float64)
        weight[:, ::3] = 1.0 / weight[:, ::3].shape[1]
    fwd = forward(tuple(mats), ens.train, output, normalizer)
    per = logistic(fwd.f, ens.train.target)
    loss = (per * weight).sum(-1) if minibatch else per.mean(-1)
    auto = torch.autograd.grad(loss.sum(), mats)
    ours = gradients(forward(tuple(m.detach() for m in mats), ens.train, output, normalizer), ens.train, normalizer, weight)
    for a, b in zip(ours, auto):
        assert torch.allclose(a, b, rtol=1e-10, atol=1e-13)


def test_schedules():
    config = tiny(train={"lr_stage1": 1.0, "lr_stage2": 0.1, "t1": 10, "steps": 40})
    hyper = {"lr_stage1": torch.tensor([1.0, 0.5]), "lr_stage2": torch.tensor([0.1, 0.5]), "t1": torch.tensor([10.0, 20.0])}
    assert learning_rate(config, hyper, 10).tolist() == [1.0, 0.5]
    assert learning_rate(config, hyper, 11).tolist() == pytest.approx([0.1, 0.5])
    assert learning_rate(config, hyper, 21).tolist() == pytest.approx([0.1, 0.5])
    cos = tiny(train={"schedule": "cosine", "steps": 40})
    assert learning_rate(cos, hyper, 40).tolist() == pytest.approx([0.1, 0.5])
    warm = tiny(train={"schedule": "warmup", "warmup_steps": 4})
    assert learning_rate(warm, hyper, 2).tolist() == pytest.approx([0.5, 0.25])
    const = tiny(train={"schedule": "constant"})
    assert learning_rate(const, hyper, 30).tolist() == [1.0, 0.5]


@pytest.mark.parametrize("optimizer", ["gd", "sgd", "adam"])
def test_batched_members_equal_single_runs(optimizer):
    config = tiny(train={"optimizer": optimizer, "batch_size": 8})
    members = members_from_config(config) + [
        Member(seed=0, variant="no-noise", noise=0.0, lr_stage1=1.0, lr_stage2=0.1, t1=15, l2=0.01),
        Member(seed=1, variant="mix-off", p0=0.0, q0=0.0, lr_stage1=0.5, lr_stage2=0.2, t1=5, l2=0.0),
    ]

    def final(ms):
        ens = build_ensemble(config, ms)
        state = State(list(init_weights(config, ms, torch.float64)))
        return run_training(ens, state, config.train.steps, lambda t, s: None).weights

    batched = final(members)
    for i, member in enumerate(members):
        single = final([member])
        for b, s in zip(batched, single):
            assert torch.allclose(b[i], s[0], rtol=0, atol=1e-10), (i, member.variant)


def test_same_seed_same_data_across_variants():
    config = tiny()
    members = members_from_config(config) + members_from_config(config, "no-l2", l2=0.0)
    ens = build_ensemble(config, members)
    assert torch.equal(ens.train.branches[0].ctx[0], ens.train.branches[0].ctx[2])
    assert not torch.equal(ens.train.branches[0].ctx[0], ens.train.branches[0].ctx[1])


def run_dir(tmp_path, name, config):
    paths = prepare(LAB, config, tmp_path / name)
    execute(LAB, config, paths, progress=False)
    return paths


FAST = dataclasses.replace(LAB, make_figures=lambda *a: [])  # resume tests: the figures are not what is tested


def _ablations_config():
    return tiny(experiment={"kind": "ablations", "ablations": ["no-noise", "joint"]}, train={"optimizer": "sgd"})


@pytest.fixture(scope="module")
def ablations_reference(tmp_path_factory):
    """The uninterrupted ablations run (made once for the module's resume cases)."""
    folder = tmp_path_factory.mktemp("ablations-ref")
    paths = prepare(FAST, _ablations_config(), folder / "ref")
    execute(FAST, _ablations_config(), paths, progress=False)
    return paths


@pytest.mark.parametrize("crash_at_line", [3, 12, 17])
def test_resume_across_groups_equals_uninterrupted(tmp_path, monkeypatch, crash_at_line, ablations_reference):
    config = _ablations_config()
    reference = pd.read_parquet(ablations_reference.metrics)
    paths = crash_then_resume(FAST, config, tmp_path / "crash", monkeypatch, crash_at_line)
    pd.testing.assert_frame_equal(pd.read_parquet(paths.metrics), reference, check_exact=True)
    pd.testing.assert_frame_equal(pd.read_parquet(paths.tables / "stages.parquet"),
                                  pd.read_parquet(ablations_reference.tables / "stages.parquet"), check_exact=True)
    assert set(reference["variant"]) == {"baseline", "no-noise", "joint", "baseline|control"}
    names = set(reference["metric"])
    assert {"baseline/test.acc.q_only", "no-noise/test.acc.q_only", "joint/test.acc.q_only"} <= names


def test_two_stage_run_layout_and_claims(tmp_path):
    paths = run_dir(tmp_path, "r", tiny())
    summary = json.loads(paths.summary.read_text())
    ids = [c["id"] for c in summary["claims"]]
    assert [i for i in ids if i in STAGED] == list(STAGED)  # the loss-level stage claims, in stage order
    assert {"spectral_corollary", "spectral_corollary_truncation", "spectral_corollary_signal", "two_stage_per_seed",
            "control_not_staged", "review_k1_floor", "review_k1_below_log2", "p_learned_stage1_acc",
            "q_not_learned_stage1_acc"} <= set(ids)
    assert len(set(ids)) == len(ids)
    frame = pd.read_parquet(paths.metrics)
    assert {"W.sv.0", "V.eig_abs.5", "WV.sym_eig.11", "test.K1_l2", "train.acc.q_only.label_neg",
            "truncate.bottom.6.acc.p_only"} <= set(frame["metric"])
    # claims follow the logged records: force the Q-part accuracy at t1 to 1 and the claim fails
    from stagewise.labs import RunResult
    from stagewise.labs.disentangled.summary import summarize
    from stagewise.runs import MemoryContext

    stages = pd.read_parquet(paths.tables / "stages.parquet").drop(columns="_part")
    assert len(stages) == 8 and set(stages["stage"]) == {"stage1", "stage2"} and set(stages["variant"]) == {"", "control"}
    tables = MemoryContext()
    forced = (stages["stage"] == "stage1") & (stages["variant"] == "")
    tables.log_table("stages", stages.assign(**{"test.acc.q_part": stages["test.acc.q_part"].where(~forced, 1.0),
                                                "test.K2.q_queries": stages["test.K2.q_queries"].where(~forced, np.log(2))}))
    again = {c.id: c for c in summarize(tiny(), frame, tables, RunResult({"seeds": [0, 1], "groups": []})).claims}
    acc = again["q_not_learned_stage1_acc"]  # the accuracy part of "Q not learned at t1", against the control's band
    assert acc.holds is False and "Q-part acc 1.00, 1.00" in acc.evidence and acc.pass_fraction == 0.0
    assert (paths.figures / "two_stage.png").exists() and (paths.figures / "spectra.pdf").exists()


def test_d_scaling_rules(tmp_path, monkeypatch):
    from dataclasses import replace

    lab = replace(LAB, make_figures=lambda *a, **k: [])
    config = tiny(experiment={"kind": "d-scaling", "dims": [4, 8]}, n_seeds=1)
    paths = prepare(lab, config, tmp_path / "d")
    execute(lab, config, paths, progress=False)
    summary = json.loads(paths.summary.read_text())
    rows = summary["details"]["d_scaling"]
    assert [r["d"] for r in rows] == [4, 8] and rows[1]["L"] > rows[0]["L"] and rows[1]["lambda"] < rows[0]["lambda"]
    assert summary["claims"][0]["id"] == "bound_tends_to_zero"


def test_divergence_names_step_and_seed(tmp_path):
    config = tiny(train={"lr_stage1": 1e300, "lr_stage2": 1e300, "noise": 0.0}, model={"init_scale": 1.0})
    paths = prepare(LAB, config, tmp_path / "div")
    with pytest.raises(Diverged):
        execute(LAB, config, paths, progress=False)
    manifest = json.loads(paths.manifest.read_text())
    frame = pd.read_parquet(paths.metrics)
    step = manifest["diverged"]["step"]
    assert manifest["status"] == "diverged" and frame["step"].max() == step
    # train.loss_l2 adds lambda/2 ||w||^2: inf exactly when the finite check finds the weights overflowing
    at = frame[(frame["step"] == step) & (frame["metric"] == "train.loss_l2")]
    first_bad = int(at[~at["value"].apply(np.isfinite)]["seed"].min())
    assert manifest["diverged"]["seed"] == first_bad  # the first member whose weights broke


@pytest.mark.parametrize("sets,needle", [
    (["data.p0=1.5"], "data.p0=1.5"),
    (["data.p0=0.7", "data.q0=0.6"], "data.p0 + data.q0"),
    (["data.prompt_len=1"], "data.prompt_len=1"),
    (["data.d=0"], "data.d=0"),
    (["data.n_train=0"], "data.n_train=0"),
    (["train.lr_stage1=-1"], "train.lr_stage1=-1"),
    (["train.lr_stage2=.nan"], "train.lr_stage2"),
    (["train.noise=-0.1"], "train.noise=-0.1"),
    (["train.t1=9000"], "train.t1=9000"),
    (["data.q_geometry=spiral"], "data.q_geometry"),
])
def test_bad_input_one_line_exit_2(cli, tmp_path, sets, needle):
    args = [a for s in sets for a in ("--set", s)]
    code, _, stderr = cli("run", "disentangled", *args, "--out", str(tmp_path / "r"))
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and needle in lines[0], lines
    assert not (tmp_path / "r").exists()


def test_reproduce_report(tmp_path, monkeypatch):
    from stagewise.orchestrate import reproduce

    from dataclasses import replace

    from stagewise.labs import Reproduction, RunSpec

    small = deep_merge(TINY, {"n_seeds": 1})
    quick = (RunSpec(lab="disentangled", preset="two-stage", overrides=small, name="two-stage"),
             RunSpec(lab="disentangled", preset="ablations", name="ablations",
                     overrides=deep_merge(small, {"experiment": {"ablations": ["no-anneal", "no-noise"]}})))
    full = quick + (RunSpec(lab="disentangled", preset="d-scaling", name="d-scaling",
                            overrides=deep_merge(small, {"experiment": {"dims": [4, 6]}})),)
    lab = replace(LAB, reproduce=Reproduction(full=full, quick=quick))
    report = reproduce(lab, tmp_path / "rep", quick=True)
    assert [r["name"] for r in report["runs"]] == ["two-stage", "ablations"]
    ids = {c["id"] for r in report["runs"] for c in r["claims"]}
    assert {"p_learned_stage1", "annealing_needed", "noise_needed", "spectral_corollary"} <= ids
    assert (tmp_path / "rep" / "figures" / "ablations-ablations.png").exists()


def test_grid_experiment_batches_all_combinations(tmp_path):
    config = tiny(experiment={"kind": "grid", "grid": {"lr_stage1": [0.5, 1.0], "noise": [0.0, 0.05]}})
    from stagewise.labs.disentangled.experiments import groups

    (group,) = groups(config)
    assert len(group.members) == 2 * 4 * 2 and [m.seed for m in group.members[:4]] == [0, 0, 0, 0]
    assert [m.control for m in group.members] == [False] * 8 + [True] * 8  # each point's shuffled-label control
    ens = build_ensemble(config, group.members)
    assert ens.train.per_data == 4  # each seed's data once, four variants over it (controls: their own data)
    paths = run_dir(tmp_path, "g", config)
    summary = json.loads(paths.summary.read_text())
    assert set(summary["details"]["grid"]) == {"lr_stage1=0.5,noise=0", "lr_stage1=0.5,noise=0.05", "lr_stage1=1,noise=0", "lr_stage1=1,noise=0.05"}
    for v in summary["details"]["grid"].values():  # staged = all four per-seed criteria: at most the rarest one
        assert v["staged_fraction"] <= min(v["pass_fraction"][k] for k in
                                           ("p_learned_stage1", "q_not_learned_stage1", "q_learned_stage2", "p_kept_stage2"))
    assert (paths.figures / "phase_diagram.png").exists()


# --------------------------------------------------------------------------- train_group on the shared driver
class Recording:
    """A run context in memory: every record in order (step, variant, values), checkpoints as
    saved (cloned, meta through JSON as the run store writes it), tables, an optional stop
    request at a step and a checkpoint to resume from."""

    def __init__(self, every: int = 7, resume=None, stop_at: int | None = None):
        self.every, self.resume, self.stop_at, self.stopped = every, resume, stop_at, False
        self.records: list[tuple[int, str, dict[str, torch.Tensor]]] = []
        self.checkpoints: list = []
        self.tables: dict[str, pd.DataFrame] = {}

    def log(self, step, values, *, variant=""):
        self.records.append((step, variant, {k: v.detach().clone() for k, v in values.items()}))

    def log_table(self, name, frame, *, part="all", csv=False):
        self.tables[f"{name}/{part}"] = frame.copy()

    def should_checkpoint(self, step):
        self.stopped = self.stopped or step == self.stop_at
        return self.stopped or step % self.every == 0

    def stop_requested(self):
        return self.stopped

    def save_checkpoint(self, step, tensors, meta=None, *, group=0):
        from stagewise.runs.context import Checkpoint, Interrupted

        self.checkpoints.append(Checkpoint(step, {k: v.clone() for k, v in tensors.items()},
                                           json.loads(json.dumps(meta)), group))
        if self.stopped:
            raise Interrupted()

    def resume_state(self):
        return self.resume

    def progress(self, total, description="training", start=None):
        from contextlib import nullcontext

        return nullcontext(lambda n=1: None)

    def note(self, key, value):
        pass


def assert_same_records(got, expected):
    assert [(s, v, sorted(r)) for s, v, r in got] == [(s, v, sorted(r)) for s, v, r in expected]
    for (_, _, a), (_, _, b) in zip(got, expected):
        assert all(torch.equal(a[k], b[k]) for k in b)


def assert_same_tables(got, expected):
    assert sorted(got) == sorted(expected)
    for name in expected:
        pd.testing.assert_frame_equal(got[name], expected[name], check_exact=True)


def records_by_group(ctx: Recording, total: int) -> list[list]:
    """The records split per group: a group's records end at its last step ``total``."""
    parts, current = [], []
    for rec in ctx.records:
        if current and rec[0] < current[-1][0] and current[-1][0] == total:
            parts.append(current)
            current = []
        current.append(rec)
    return parts + [current]


@pytest.mark.parametrize("kind,extra,optimizer", [("ablations", {"ablations": ["no-noise", "joint"], "control": True}, "sgd"),
                                                  ("d-scaling", {"dims": [4, 6]}, "adam")])
def test_group_checkpoints_keep_their_layout_and_resume_bit_for_bit(kind, extra, optimizer):
    """Every checkpoint names its group, holds State.tensors under ``g{group}.`` and the record
    {group, step, stage_rows}; resuming from each one (the lab's own resume path) logs exactly
    what the uninterrupted run logged after it, tables included."""
    from stagewise.labs.disentangled.experiments import groups

    config = tiny(experiment={"kind": kind, **extra}, train={"optimizer": optimizer})
    plan, total = groups(config), config.train.steps
    ref = Recording()
    LAB.run(config, ref)
    per_group = records_by_group(ref, total)
    assert len(per_group) == len(plan) and [c.group for c in ref.checkpoints] == [g for g in range(len(plan)) for _ in range(6)]
    for ck in ref.checkpoints:
        assert set(ck.meta) == {"group", "step", "stage_rows"} and ck.meta["group"] == ck.group and ck.meta["step"] == ck.step
        parts = {k.split(".")[1] for k in ck.tensors}  # weights, optimizer moments (none for SGD), random streams
        assert parts == ({"w", "rng"} if optimizer == "sgd" else {"w", "opt", "rng"}) and all(k.startswith(f"g{ck.group}.") for k in ck.tensors)
        ends = sum(ck.step >= mark for mark in (config.train.t1, total))  # stage ends reached by the checkpoint
        assert len(ck.meta["stage_rows"]) == ends * len(plan[ck.group].members)
    for ck in ref.checkpoints[2::3]:
        resumed = Recording(resume=ck)
        LAB.run(config, resumed)
        expected = [r for r in per_group[ck.group] if r[0] > ck.step] + [r for part in per_group[ck.group + 1:] for r in part]
        assert_same_records(resumed.records, expected)
        index = {f"{table}/{g.name}": i for i, g in enumerate(plan) for table in ("stages", "floors", "floor_starts")}
        # a group's table part is logged after its last step, before that step's checkpoint
        assert_same_tables(resumed.tables, {k: v for k, v in ref.tables.items()
                                            if index[k] > ck.group or (index[k] == ck.group and ck.step < total)})


def test_checkpoint_from_plain_state_tensors_resumes_the_lab():
    """The checkpoint format is the engine's packing of the training state: a checkpoint built
    by hand from :meth:`State.tensors` of the bare updates (no lab loop) to step s, with the
    record {group, step, stage_rows}, resumes the lab to the uninterrupted run's records."""
    from stagewise.labs.disentangled.experiments import groups
    from stagewise.runs.context import Checkpoint

    config = tiny(train={"optimizer": "sgd"})
    group, s = groups(config)[0], 21
    ref = Recording()
    LAB.run(config, ref)
    ens = build_ensemble(config, group.members)
    state = run_training(ens, State(list(init_weights(config, group.members, torch.float64))), s, lambda t, st: None)
    rows = [r for c in ref.checkpoints if c.step == s for r in c.meta["stage_rows"]]
    resumed = Recording(resume=Checkpoint(s, state.tensors(ens, "g0."), {"group": 0, "step": s, "stage_rows": rows}, 0))
    LAB.run(config, resumed)
    assert_same_records(resumed.records, [r for r in ref.records if r[0] > s])
    assert_same_tables(resumed.tables, ref.tables)


def test_stop_request_saves_then_resumes_to_the_uninterrupted_run():
    config = tiny(experiment={"kind": "ablations", "ablations": ["joint"]})
    ref = Recording()
    LAB.run(config, ref)
    from stagewise.runs.context import Interrupted

    stopped = Recording(stop_at=10)
    with pytest.raises(Interrupted):
        LAB.run(config, stopped)
    last = stopped.checkpoints[-1]
    assert last.step == 10 and last.group == 0 and stopped.records[-1][0] == 10
    assert_same_records(stopped.records, ref.records[:len(stopped.records)])
    resumed = Recording(resume=last)
    LAB.run(config, resumed)
    assert_same_records(stopped.records + resumed.records, ref.records)
    assert_same_tables(resumed.tables, ref.tables)


def test_stage_rows_at_step_zero_when_t1_is_zero():
    """t1 = 0: the first stage ends at the initialization; its rows come from step 0's record."""
    config = tiny(train={"t1": 0})
    ctx = Recording()
    LAB.run(config, ctx)
    table = next(iter(ctx.tables.values()))
    first = table[table["stage"] == "stage1"]
    assert set(first["step"]) == {0}
    for variant in ("", "control"):  # the run and its shuffled-label control
        rows = first[first["variant"] == variant]
        assert rows["seed"].tolist() == config.seed_list()
        at0 = {k: v for s, v_, r in ctx.records if s == 0 and v_ == variant for k, v in r.items()}
        assert rows["test.acc"].tolist() == at0["test.acc"].tolist()


def test_float32_run_logs_truncation_metrics_like_its_own_accuracies():
    config = tiny(model={"dtype": "float32"})
    ctx = Recording()
    LAB.run(config, ctx)
    last = {k: v for s, _, r in ctx.records if s == config.train.steps for k, v in r.items()}
    trunc = [k for k in last if k.startswith("truncate.")]
    assert trunc and all(last[k].dtype == last["test.acc.both"].dtype and bool(torch.isfinite(last[k]).all()) for k in trunc)
    # keeping all 2d directions rebuilds blockdiag(W, V): the same accuracy as the weights themselves
    assert torch.equal(last[f"truncate.top.{2 * config.data.d}.acc.both"], last["test.acc.both"])


def test_diverged_step_logs_its_evaluation_and_no_checkpoint_holds_it():
    """Weights are checked at every step: the diverged step's record is its stage and its
    evaluations (no weight metrics of non-finite weights), every variant's, and the last
    checkpoint is the one before it."""
    config = tiny(train={"lr_stage2": 1e300, "noise": 0.0}, experiment={"kind": "ablations", "ablations": ["no-l2"]})
    ctx = Recording()
    with pytest.raises(Diverged) as err:
        LAB.run(config, ctx)
    step = err.value.step
    assert config.train.t1 < step and step % config.train.log_every != 0  # a step nothing else would log
    last = [(v, r) for s, v, r in ctx.records if s == step]
    assert sorted(v for v, _ in last) == ["baseline", "baseline|control", "no-l2"]
    for _, values in last:
        assert {"stage", "train.loss", "test.loss", "test.acc"} <= set(values) and not any(k.startswith("W.") for k in values)
        assert bool((values["stage"] == 2.0).all())
    assert all(s <= step for s, _, _ in ctx.records)
    assert ctx.checkpoints and max(c.step for c in ctx.checkpoints) < step
    assert all(bool(torch.isfinite(t).all()) for c in ctx.checkpoints for k, t in c.tensors.items() if ".w." in k)
