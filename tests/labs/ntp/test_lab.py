"""The NTP lab end to end: the issue's acceptance figures, claims computed from metrics,
generalization cases, the reproduce report."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from stagewise.config import resolve
from stagewise.labs import RunSpec, get_lab
from stagewise.labs.ntp.data import example1
from stagewise.labs.ntp.generalize import build_suite, classify
from stagewise.labs.ntp.problem import build_problem
from stagewise.labs.ntp.summary import summarize
from stagewise.labs.ntp.train import cosine, train_two_stage
from stagewise.orchestrate import execute, prepare
from stagewise.runs import RunPaths

LAB = get_lab("ntp")


@pytest.fixture(scope="module")
def example1_run(run_cache):
    """Example 1 as the paper runs it (the session cache's run: read only)."""
    config = resolve(LAB.Config, LAB.preset_overrides("example1"))
    paths = RunPaths(run_cache.path(RunSpec(lab="ntp", preset="example1")))
    return config, paths, pd.read_parquet(paths.metrics), json.loads(paths.summary.read_text())


def test_example1_acceptance(example1_run):
    config, _, frame, summary = example1_run
    eta0, _ = config.step_sizes(4)
    T, total = config.train.steps_stage1, config.train.steps_stage1 + config.train.steps_stage2
    wide = frame.pivot_table(index="step", columns="metric", values="value")
    stage1 = wide.loc[1:T]
    assert np.abs(stage1["W_ov.cos_target"] - 1).max() <= 1e-9
    assert np.abs(stage1["W_ov.fro"] - stage1.index.to_numpy() * eta0).max() <= 1e-12
    details = summary["details"]
    assert details["wkq_star_norm_sq"] == pytest.approx(13 / 6, abs=1e-6)
    assert details["wov_star_norm"] == pytest.approx(math.sqrt(3), abs=1e-6)
    assert details["prop2_gap"] <= 1e-9
    assert wide.loc[total, "W_kq.cos_target"] >= 0.99
    named = {row["input"]: row["predicted"] for row in details["named_cases"]}
    assert named == {"S P": "V", "O S P": "P"}
    by_id = {c["id"]: c for c in summary["claims"]}
    assert by_id.pop("closer_to_qp_than_prop2")["holds"] is None  # Proposition 2 is exact on Example 1
    assert all(c["holds"] for c in by_id.values()), [c for c in by_id.values() if not c["holds"]]


def test_claims_are_computed_from_metrics(example1_run):
    config, paths, frame, summary = example1_run
    from stagewise.labs import RunResult
    from stagewise.runs import TableStore

    details = summary["details"]
    extras = RunResult({"seeds": [0], "vocab_size": 4, "dim": 4, "eta0": 0.1, "eta": 0.025, "n_samples": [9],
                        "targets": [{k: details[k] for k in ("wov_star_norm", "wkq_star_norm_sq", "prop2_wkq_norm_sq", "prop2_gap")}],
                        "named_cases": details["named_cases"], "orthonormal": True, "max_len": [3], "qp_prop2_cos": [1.0]})
    tables = TableStore(paths.tables)  # the generalization table, read back from the run
    again = summarize(config, frame, tables, extras)
    assert [c.holds for c in again.claims] == [c["holds"] for c in summary["claims"]]
    total = config.train.steps_stage1 + config.train.steps_stage2
    broken = frame.copy()
    broken.loc[(broken["metric"] == "W_kq.cos_target") & (broken["step"] == total), "value"] = 0.5
    broken.loc[(broken["metric"] == "W_ov.cos_target") & (broken["step"] == 3), "value"] = 0.9
    claims = {c.id: c for c in summarize(config, broken, tables, extras).claims}
    assert not claims["cos_wkq_to_one"].holds and "0.5" in claims["cos_wkq_to_one"].evidence
    assert not claims["stage1_exact"].holds


def test_paper_preset_eight_seeds_reach_cos_095():
    config = resolve(LAB.Config, LAB.preset_overrides("paper"), extra={"n_seeds": 8})
    problem = build_problem(config)
    assert problem.emb.shape[1:] == (20, 20)
    params = train_two_stage(config, problem)
    wkq, wov = params.merged()
    cos_kq, _ = cosine(wkq, problem.wkq_star)
    cos_ov, _ = cosine(wov, problem.wov_star)
    assert cos_kq.min() >= 0.95, cos_kq
    assert (cos_ov - 1).abs().max() <= 1e-9


def test_generalization_classes_example1():
    ds = example1()
    idx = {t: ds.index(t) for t in ds.tokens}
    assert classify(ds, (idx["S"], idx["P"])) == (idx["V"], "non-comparable token ranks highest")
    assert classify(ds, (idx["O"], idx["S"], idx["P"]))[0] == idx["P"]
    assert classify(ds, (idx["S"], idx["V"], idx["P"]))[0] is None  # two non-comparable tokens tie
    assert classify(ds, (4, idx["P"]))[0] is None  # unknown token
    suite = build_suite(ds, max_cases=200, seed=0)
    seen = {s.input for s in ds.samples}
    assert not any(case.input in seen for case in suite)
    assert {c.category for c in suite} >= {"optimal + non-comparable", "non-comparable + non-optimal", "two non-comparable"}


def test_unseen_query_is_not_covered():
    from stagewise.labs.ntp.data import build_dataset

    ds = build_dataset(["a", "b", "c", "d"], [(["a"], "b"), (["b"], "c"), (["c"], "d"), (["d"], "a"), (["a", "c"], "b")])
    suite = build_suite(ds, 50, 0)
    unseen = [c for c in suite if c.category == "unseen query"]
    assert unseen and all(c.expected is None for c in unseen)


def test_reproduce_quick_report(tmp_path, monkeypatch):
    from stagewise.orchestrate import reproduce

    from dataclasses import replace

    from stagewise.labs import Reproduction, RunSpec

    quick = (RunSpec(lab="ntp", preset="example1", overrides={"train": {"steps_stage2": 300}}, name="example1"),
             RunSpec(lab="ntp", preset="paper", overrides={"n_seeds": 2, "data": {"vocab_size": 8},
                                                            "train": {"steps_stage1": 100, "steps_stage2": 200}}, name="paper"))
    lab = replace(LAB, reproduce=Reproduction(full=quick + (RunSpec(lab="ntp", preset="adamw", name="adamw"),), quick=quick))
    report = reproduce(lab, tmp_path / "rep", quick=True)
    assert [r["name"] for r in report["runs"]] == ["example1", "paper"]
    for name in ("report.html", "claims.md", "claims.json", "figures/example1-figure2.png", "figures/paper-rate_fits.pdf"):
        assert (tmp_path / "rep" / name).exists(), name
    html = (tmp_path / "rep" / "report.html").read_text()
    assert "data:image/png;base64" in html and "stage1_exact" in html


OPTION_CASES = {
    "joint": {"train": {"algorithm": "joint"}},
    "gd": {"train": {"optimizer": "gd", "lr_stage1": 1.0, "lr_stage2": 0.5}},
    "adam": {"train": {"optimizer": "adam"}},
    "adamw": {"train": {"optimizer": "adamw"}},
    "rotated": {"data": {"embedding": "rotated"}},
    "gaussian": {"data": {"embedding": "gaussian"}},
    "wide": {"data": {"dim": 9}},
    "factored": {"model": {"init": "random", "factored": True}},
    "float32": {"model": {"dtype": "float32"}},
    "sparse-log": {"train": {"log_every": 7}, "generalize": {"every": 3}},
    "flag": {"train": {"on_tiny_grad": "flag"}},
    "complete-prefix": {"data": {"complete": True, "prefix_closed": True}},
    "uniform-shared": {"data": {"weights": "uniform", "vary_with_seed": False}},
    "sum": {"train": {"loss_reduction": "sum"}},
}


@pytest.mark.parametrize("name", sorted(OPTION_CASES))
def test_every_option_runs_end_to_end(tmp_path, monkeypatch, name):
    """Each config switch trains, logs, summarizes and finishes 'done' (figures skipped)."""
    from stagewise.config import deep_merge

    from dataclasses import replace

    lab = replace(LAB, make_figures=lambda *a, **k: [])
    base = {"n_seeds": 2, "data": {"vocab_size": 6}, "train": {"steps_stage1": 20, "steps_stage2": 30}}
    config = resolve(LAB.Config, deep_merge(base, OPTION_CASES[name]))
    lab.check(config)
    paths = prepare(lab, config, tmp_path / name)
    manifest = execute(lab, config, paths, progress=False)
    assert manifest["status"] == "done"
    summary = json.loads(paths.summary.read_text())
    # every claim is testable under these options (none comes back null = "not testable here"), except the
    # long-horizon ones, null by design here: 30 stage-2 steps are too short for the late window, and Theorem 1's
    # band starts at zero init
    by_design = ("horizon too short", "coincide on every seed", "model.init=zero", "for stage 2 of two-stage")
    assert summary["claims"] and all(c["holds"] is not None or any(r in c["reason"] for r in by_design)
                                     for c in summary["claims"]), [c for c in summary["claims"] if c["holds"] is None]
    frame = pd.read_parquet(paths.metrics)
    assert frame["step"].max() == 50 and np.isfinite(frame[frame["metric"] == "train.loss"]["value"]).all()
