"""stagewise.testing.check_lab on a lab written outside the package (defined here, never in
the registry): the whole suite passes, broken variants fail with a clear message, declared
skips and missing optional packages are skipped with their reason."""

from __future__ import annotations

import dataclasses
import json
import shutil
from importlib.util import find_spec
from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd
import pytest
import torch
from pydantic import Field

from stagewise.config import RunBase, TrainBase
from stagewise.errors import NotAvailable, UserError
from stagewise.labs import REGISTRY, Lab, Reproduction, Resources, RunResult, RunSpec, get_lab
from stagewise.report.claims import ClaimSpec, Stats, Summary, own, paper
from stagewise.testing import CHECKS, ConformanceError, Session, check_lab, check_names, lab_checks

matplotlib.use("Agg")

NAME = "tiny"
MISSING_PACKAGE = "stagewise_no_such_package"  # what the `needs_package` preset asks for


# ----------------------------------------------------------------- a lab outside the package
class TinyTrain(TrainBase):
    steps: int = Field(12, ge=1)
    lr: float = Field(0.3, gt=0, lt=1)
    checkpoint_every: int = 4


class TinyConfig(RunBase):
    """Per seed one number ``w`` (S,) pulled to ``target`` by gradient descent on
    ``loss = (w - target)**2``: ``w <- w - lr * (w - target)``."""

    target: float = 1.0
    package: str = ""  # an optional package this config needs ("" for none)
    train: TinyTrain = Field(default_factory=TinyTrain)


CONVERGES = ClaimSpec(id="converges", statement="gradient descent brings w close to the target", source=own("tiny lab"),
                      quantity="final loss", relation="<", threshold=1.0, control="lr too small")


def tiny_check(config: TinyConfig) -> None:
    if config.package and find_spec(config.package) is None:
        raise NotAvailable(config.package, f"package={config.package}: not installed (pip install {config.package})")


def tiny_run(config: TinyConfig, ctx, resume_offset: float = 0.0) -> RunResult:
    """``resume_offset`` != 0 is a broken resume: the state it continues from is off by it."""
    seeds = ctx.seeds
    state, start = ctx.resume_state(), 0
    if state is None:
        w = torch.stack([torch.randn((), generator=torch.Generator().manual_seed(s), dtype=torch.float64) for s in seeds])
    else:
        w, start = state.tensors["w"] + resume_offset, state.step + 1  # (S,)
    for step in range(start, config.train.steps):
        ctx.log(step, {"loss": (w - config.target) ** 2, "w": w})  # (S,) each
        w = w - config.train.lr * (w - config.target)  # (S,)
        if ctx.should_checkpoint(step):
            ctx.save_checkpoint(step, {"w": w})
    ctx.log_table("final", pd.DataFrame({"seed": seeds, "w": w.tolist()}))
    return RunResult(extras={"seeds": list(seeds)})


def tiny_summarize(config: TinyConfig, frame: pd.DataFrame, tables, result: RunResult) -> Summary:
    last = frame[frame["step"] == frame["step"].max()]
    per_seed = {str(seed): dict(zip(rows["metric"], rows["value"])) for seed, rows in last.groupby("seed")}
    final = {metric: Stats.of(rows["value"]) for metric, rows in last.groupby("metric")}
    losses = {seed: values["loss"] for seed, values in per_seed.items()}
    claim = CONVERGES.result(losses, f"final loss at most {max(losses.values()):.3g}")
    return Summary(lab=NAME, seeds=result.extras["seeds"], final=final, per_seed=per_seed, claims=[claim])


def tiny_figures(config: TinyConfig, frame: pd.DataFrame, tables, summary: Summary, folder: Path) -> list[Path]:
    import matplotlib.pyplot as plt

    folder.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots()
    for seed, rows in frame[frame["metric"] == "loss"].groupby("seed"):
        ax.semilogy(rows["step"], rows["value"], label=f"seed {seed}")
    ax.legend()
    paths = [folder / "loss.png", folder / "loss.pdf"]
    for path in paths:
        fig.savefig(path)
    plt.close(fig)
    return paths


TINY = Lab(
    name=NAME, description="one number per seed pulled to a target", Config=TinyConfig,
    presets={"fast": ("six steps", {"train": {"steps": 6, "checkpoint_every": 2}}),
             "needs_package": ("needs an optional package", {"package": MISSING_PACKAGE})},
    reproduce=Reproduction(full=(RunSpec(lab=NAME, preset="fast", name="fast"),),
                           quick=(RunSpec(lab=NAME, preset="fast", name="fast"),)),
    check=tiny_check, run=tiny_run, summarize=tiny_summarize, make_figures=tiny_figures,
    estimate=lambda config: Resources(memory_bytes=8 * config.n_seeds),
    smoke={"n_seeds": 3, "train": {"steps": 12}}, key_metrics=("loss",), claims=(CONVERGES,),
)


# ------------------------------------------------------------------------------------ tests
def test_an_unregistered_lab_passes_and_leaves_the_registry_as_it_was(tmp_path):
    assert NAME not in REGISTRY
    report = check_lab(TINY, workdir=tmp_path)
    assert NAME not in REGISTRY
    assert [r.name for r in report.results] == list(check_names(TINY))
    assert {r.name.split("[")[0] for r in report.results} == set(CHECKS)
    assert report.ok and {r.name for r in report.skipped} == {"preset[needs_package]"}
    assert MISSING_PACKAGE in report["preset[needs_package]"].message  # the NotAvailable message is the reason
    runs = [p for p in tmp_path.iterdir()]
    assert len(runs) == 1 and (runs[0] / "smoke" / "summary.json").is_file() and not (runs[0] / "unknown-key").exists()


def test_a_resume_that_does_not_reproduce_fails_with_a_clear_message(tmp_path):
    broken = dataclasses.replace(TINY, run=lambda config, ctx: tiny_run(config, ctx, resume_offset=1e-3))
    with pytest.raises(ConformanceError) as err:
        check_lab(broken, workdir=tmp_path, checks=["smoke_run", "resume_equals_uninterrupted"])
    (failed,) = err.value.report.failed
    assert failed.name == "resume_equals_uninterrupted" and "resumed run differs" in failed.message
    assert "resume_equals_uninterrupted: failed: resumed run differs" in str(err.value)
    assert err.value.report["smoke_run"].outcome == "passed"


def test_undeclared_claims_and_missing_key_metrics_fail(tmp_path):
    broken = dataclasses.replace(TINY, claims=(), key_metrics=("loss", "margin"))
    report = check_lab(broken, workdir=tmp_path, checks=["claims_declared", "key_metrics"], strict=False)
    assert [r.outcome for r in report.results] == ["failed", "failed"]
    assert report["claims_declared"].message == "claims not declared in Lab.claims: converges (the lab declares none)"
    assert "key metric margin missing" in report["key_metrics"].message


PAPER = {"paper1": "paper 1: A. Author, 2001 (a tiny theorem)"}
"""The paper the cited variant of the tiny lab declares."""


def _cited(claim):
    return claim.model_copy(update={"source": paper("paper1", "Theorem 1")})


def cited_summarize(config: TinyConfig, frame: pd.DataFrame, tables, result: RunResult) -> Summary:
    """The tiny lab's summary, its claim citing paper 1."""
    summary = tiny_summarize(config, frame, tables, result)
    return summary.model_copy(update={"claims": [_cited(c) for c in summary.claims]})


def test_a_cited_paper_is_declared_and_the_summary_carries_it(tmp_path):
    from stagewise.labs.contract import LabCommand

    cited = dataclasses.replace(TINY, claims=(_cited(CONVERGES),), summarize=cited_summarize)
    report = check_lab(cited, workdir=tmp_path / "a", checks=["lab_value"], strict=False)
    assert report["lab_value"].message == "claims cite papers not declared in Lab.sources: ['paper1']"
    clash = dataclasses.replace(cited, sources=PAPER, commands={"run": LabCommand(help="h", what="w", run=print)})
    report = check_lab(clash, workdir=tmp_path / "b", checks=["lab_value"], strict=False)
    assert report["lab_value"].message == "Lab.commands named like commands the CLI has: ['run']"
    declared = dataclasses.replace(cited, sources=PAPER)
    report = check_lab(declared, workdir=tmp_path / "c", checks=["lab_value", "smoke_run", "claims_declared"])
    summary = json.loads(next((tmp_path / "c").glob("*/smoke/summary.json")).read_text())
    assert summary["sources"] == PAPER and summary["claims"][0]["source"] == {"kind": "paper", "paper": "paper1", "where": "Theorem 1"}


def test_the_summary_of_a_lab_carries_its_sources_over_what_summarize_names():
    made = Summary(lab=NAME, seeds=[0], sources={"paper2": "paper 2: named by summarize"})
    lab = dataclasses.replace(TINY, sources=PAPER, summarize=lambda *args: made)
    assert lab.summary(None, None, None, RunResult()).sources == {**PAPER, **made.sources}
    assert dataclasses.replace(TINY, summarize=lambda *args: made).summary(None, None, None, RunResult()) == made


def test_declared_skips_carry_their_reason_and_unknown_names_are_errors(tmp_path):
    skipping = dataclasses.replace(TINY, conformance_skips={"figures": "figures are drawn by the report",
                                                            "preset[fast]": "fast is for demos"})
    report = check_lab(skipping, workdir=tmp_path, checks=["preset", "figures"])
    assert report["figures"].outcome == "skipped" and "figures are drawn by the report" in report["figures"].message
    assert report["preset[fast]"].outcome == "skipped" and "fast is for demos" in report["preset[fast]"].message
    assert report["preset[(defaults)]"].outcome == "passed"
    with pytest.raises(UserError, match="conformance_skips: unknown check 'figure' \\(did you mean 'figures'\\?\\)"):
        check_lab(dataclasses.replace(TINY, conformance_skips={"figure": "typo"}), workdir=tmp_path)
    with pytest.raises(UserError, match="unknown check 'resume'"):
        check_lab(TINY, workdir=tmp_path, checks=["resume"])


def test_checks_of_a_failed_smoke_run_are_skipped_with_why(tmp_path):
    def failing(config, ctx):
        raise RuntimeError("the model did not fit")

    report = check_lab(dataclasses.replace(TINY, run=failing), workdir=tmp_path,
                       checks=["smoke_run", "figures", "key_metrics"], strict=False)
    assert report["smoke_run"].outcome == "failed" and "RuntimeError: the model did not fit" in report["smoke_run"].message
    for name in ("figures", "key_metrics"):
        assert report[name].outcome == "skipped" and "smoke run, which failed" in report[name].message


def test_a_registered_name_replaced_by_a_value_uses_the_value():
    ntp = get_lab("ntp")
    report = check_lab(dataclasses.replace(ntp, description=""), checks=["lab_value"], strict=False)
    assert report["lab_value"].outcome == "failed" and "description" in report["lab_value"].message
    assert get_lab("ntp") is ntp


def test_lab_checks_are_one_pair_per_check_and_run_alone_as_in_check_lab(tmp_path):
    """lab_checks: the (lab, check) pairs pytest parametrizes over, in check_names order, each
    run alone in its own session with the outcome check_lab gives it; a smoke source is used
    for the smoke run (here: one finished run, copied)."""
    pairs = lab_checks(TINY)
    assert [p.name for p in pairs] == list(check_names(TINY)) and str(pairs[0]) == f"{NAME}-lab_value"
    assert [p.name for p in lab_checks(TINY, checks=["preset", "figures"])] == \
        ["preset[(defaults)]", "preset[fast]", "preset[needs_package]", "figures"]
    report = check_lab(TINY, workdir=tmp_path / "all", strict=False)
    with REGISTRY.registered(TINY):
        smoke = Session(TINY, tmp_path / "made").smoke_run()[0]
    sources = []

    def copy_of_smoke(spec, folder):
        sources.append(spec)
        shutil.copytree(smoke, folder)
        return folder

    for i, pair in enumerate(pairs):
        alone = pair.run(Session(TINY, tmp_path / f"alone-{i}", smoke_source=copy_of_smoke))
        assert (alone.outcome, alone.name) == (report[pair.name].outcome, pair.name), pair
    assert sources and all(spec == Session(TINY, tmp_path).smoke_spec() for spec in sources)
    assert NAME not in REGISTRY
    with pytest.raises(UserError, match="unknown check 'figure'"):
        lab_checks(TINY, checks=["figure"])
    with pytest.raises(UserError, match="session is of lab ntp"):
        pairs[0].run(Session(get_lab("ntp"), tmp_path))


def test_the_tiny_run_converges():
    """The tiny lab's numbers are what its docstring says (the suite is not checking a no-op)."""
    config = TinyConfig(n_seeds=2)
    w0 = np.array([torch.randn((), generator=torch.Generator().manual_seed(s), dtype=torch.float64).item() for s in (0, 1)])
    expected = (1 - config.train.lr) ** config.train.steps * (w0 - config.target) + config.target
    from stagewise.runs import MemoryContext

    ctx = MemoryContext(config.seed_list())
    tiny_run(config, ctx)
    np.testing.assert_allclose(ctx.get("final")["w"], expected, rtol=1e-12)
