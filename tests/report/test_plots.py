"""Figure conventions (stagewise.report.plots), walked through every figure a smoke run of
each lab and a small sweep's collect make: labelled axes, no empty panels, distinct colours
per panel, legends off the data, panels readable at the report's width, log axes where the
values or the sweep axis are log-spaced; undefined cosines drawn as gaps; the claim value vs
axis figure with its threshold. The checker itself is shown to catch each violation."""

from __future__ import annotations

import json

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from runcache import without_run_figures
from matplotlib.collections import PathCollection

from runcache import smoke_spec
from stagewise import RunSpec, execute_spec
from stagewise.labs import REGISTRY, get_lab, spec_config
from stagewise.orchestrate.collect import collect
from stagewise.orchestrate.executor_options import ExecutorOptions
from stagewise.orchestrate.sweep import run_sweep
from stagewise.orchestrate.sweepplan import SweepSpec, plan
from stagewise.report.claims import Summary, read_summary
from stagewise.runs import TableStore
from stagewise.report.plots import (MIN_PANEL_IN, REPORT_WIDTH_IN, check_figure, gap_where_zero, palette, panel_grid,
                                    recording, use_log_scale)

LABS = sorted(REGISTRY)
SWEEP = {"lab": "ntp", "preset": "example1",
         "set": {"train.steps_stage1": 6, "train.steps_stage2": 10, "train.optimizer": "gd", "n_seeds": 2},
         "axes": {"train.lr_stage2": {"logrange": [0.1, 1.0, 3]}},  # one decade: log because it is a logrange
         "report": {"metrics": ["train.loss"], "claims": ["cos_wkq_to_one"]}}
CLAIM = "cos_wkq_to_one"
EXPERIMENTS = {  # (lab, preset, overrides on its smoke settings): the other figure sets the labs make
    "grid": ("disentangled", None, {"experiment": {"kind": "grid", "grid": {"lr_stage1": [0.5, 1.0], "noise": [0.0, 0.05]}}}),
    "ablations": ("disentangled", None, {"experiment": {"kind": "ablations", "ablations": ["no-noise", "joint"]}}),
    "d-scaling": ("disentangled", None, {"experiment": {"kind": "d-scaling", "dims": [4, 8]}, "n_seeds": 1}),
    "robustness": ("disentangled", None, {"experiment": {"kind": "robustness", "dims": [4, 6], "seed_blocks": [0, 100]},
                                          "n_seeds": 1}),
    # no max-margin W_kq*: cos(W_kq, W_kq*) has no value in stage 2 (panels without data are left out)
    "ntp-undefined-cos": ("ntp", "q3-conflicting-orders", {"train": {"steps_stage1": 10, "steps_stage2": 20}}),
}


@pytest.fixture(scope="module", params=LABS)
def lab_figures(request, tmp_path_factory, run_cache):
    """(lab name, run folder, every Figure of the smoke run): the session cache's smoke run
    (read only), its figures drawn again from what it wrote (config, metrics, tables, summary)
    into a folder of this test, the same call the runner makes at the end of a run."""
    lab = get_lab(request.param)
    spec = smoke_spec(lab.name)
    cached = run_cache.path(spec)
    root = tmp_path_factory.mktemp(request.param)
    summary = Summary.model_validate(json.loads((cached / "summary.json").read_text()))
    with recording() as figures:
        lab.make_figures(spec_config(spec), pd.read_parquet(cached / "metrics.parquet"), TableStore(cached / "tables"), summary,
                         root / "figures")
    assert sorted(p.name for p in (root / "figures").iterdir()) == sorted(p.name for p in (cached / "figures").iterdir())
    return request.param, cached, list(figures)


@pytest.fixture(scope="module", params=sorted(EXPERIMENTS))
def experiment_figures(request, tmp_path_factory):
    """(case, run folder, every Figure the run of that case saved)."""
    from stagewise.config import deep_merge

    name, preset, overrides = EXPERIMENTS[request.param]
    lab = get_lab(name)
    root = tmp_path_factory.mktemp(request.param) / "run"
    smoke = {} if preset else dict(lab.smoke)
    spec = RunSpec(lab=name, preset=preset, overrides=deep_merge(smoke, overrides), name=request.param)
    with recording() as figures:
        execute_spec(spec, root, raise_on_failure=True)
    return request.param, root, list(figures)


@pytest.fixture(scope="module")
def sweep_figures(tmp_path_factory):
    """(sweep folder, Collected, every Figure collect saved)."""
    out = tmp_path_factory.mktemp("sweep") / "s"
    spec = SweepSpec.model_validate(SWEEP)
    with without_run_figures(labs=("ntp",)):
        run_sweep(plan(spec), out, "ntp", opts=ExecutorOptions(kind="local", max_parallel=1), axes=list(spec.axes),
                  report=spec.report)
    with recording() as figures:
        got = collect(out)
    return out, got, list(figures)


def test_every_lab_figure_keeps_the_conventions(lab_figures):
    name, root, figures = lab_figures
    pngs = sorted((root / "figures").glob("*.png"))
    assert figures and len(figures) == len(pngs), f"{name}: every written figure is recorded"
    for i, fig in enumerate(figures):
        assert check_figure(fig) == (), f"figure {i} of {[p.name for p in pngs]}"


def test_every_other_experiment_figure_keeps_the_conventions(experiment_figures):
    kind, root, figures = experiment_figures
    pngs = sorted((root / "figures").glob("*.png"))
    assert figures and len(figures) == len(pngs), f"{kind}: every written figure is recorded"
    for i, fig in enumerate(figures):
        assert check_figure(fig) == (), f"figure {i} of {[p.name for p in pngs]}"


def test_ntp_figures_gap_undefined_cosines_and_say_slope_only(lab_figures):
    name, root, figures = lab_figures
    if name != "ntp":
        pytest.skip("NTP lab figures only")
    metrics = pd.read_parquet(root / "metrics.parquet")
    figure2 = next(f for f in figures if "two-stage dynamics" in f._suptitle.get_text())
    for weight, norm in (("ov", "W_ov.fro"), ("kq", "W_kq.fro")):  # the panel of cos(W, W*) and the norm of W
        ax = next(a for a in figure2.axes if a.get_title().startswith(f"cos($W_{{{weight}}}"))
        zero = metrics[(metrics["metric"] == norm) & (metrics["value"] == 0)]
        assert len(zero), f"{norm} is 0 somewhere in this run (zero init)"
        for line in (ln for ln in ax.lines if ln.get_transform().contains_branch(ax.transData) and len(ln.get_xdata())):
            x, y = np.asarray(line.get_xdata(), float), np.asarray(line.get_ydata(), float)
            assert np.isnan(y[np.isin(x, zero["step"].unique())]).all()  # undefined: a gap, not the logged 0
            assert np.isfinite(y[~np.isin(x, zero["step"].unique())]).any()
    labels = [t.get_text() for f in figures for a in f.axes if a.get_legend() for t in a.get_legend().get_texts()]
    assert any("theory" in t and "slope only" in t for t in labels)
    assert not (root / "figures" / "generalization.png").exists()  # a table, in tables/generalization


def test_every_sweep_figure_keeps_the_conventions(sweep_figures):
    out, got, figures = sweep_figures
    assert got.warnings == [] and len(figures) == len(got.figures) >= 3
    for fig, png in zip(figures, got.figures):
        assert check_figure(fig, log_x=("train.lr_stage2",)) == (), png.name
        ax = fig.axes[0]
        if ax.get_xlabel() == "train.lr_stage2":
            assert ax.get_xscale() == "log"


def test_claim_value_column_and_figure(sweep_figures):
    out, got, figures = sweep_figures
    frame = got.frame
    for run_dir, rows in frame[frame["status"] == "done"].groupby("run_dir"):
        claim = next(c for c in read_summary(out / run_dir / "summary.json").claims if c.id == CLAIM)
        for _, row in rows.iterrows():
            assert row[f"claim_value.{CLAIM}"] == pytest.approx(claim.per_seed[str(row["seed"])], rel=0, abs=0)
    fig = next(f for f, p in zip(figures, got.figures) if p.name.startswith(f"claim_value.{CLAIM}_vs_"))
    ax = fig.axes[0]
    spec = next(c for c in get_lab("ntp").claims if c.id == CLAIM)
    ref = [ln for ln in ax.lines if not ln.get_transform().contains_branch(ax.transData)]
    assert [tuple(ln.get_ydata()) for ln in ref] == [(spec.threshold, spec.threshold)]
    assert spec.relation in ax.get_title() and "threshold" in ax.get_legend().get_texts()[-1].get_text()
    dots = np.concatenate([c.get_offsets() for c in ax.collections if isinstance(c, PathCollection)])  # one per seed
    assert sorted(dots[:, 1]) == pytest.approx(sorted(frame[f"claim_value.{CLAIM}"].dropna()))


# ------------------------------------------------------------------ the rules themselves
def test_log_scale_rule():
    assert use_log_scale([0.1, 0.31622776601683794, 1.0])  # a logrange, one decade
    assert use_log_scale([0.01, 1.0]) and use_log_scale([1e-4, 3e-3, 1e-1, 1.0])  # >= 2 decades, even in log
    assert use_log_scale([1.0, 2.0], declared=True)
    assert not use_log_scale(np.arange(1, 1001))  # 3 decades, but evenly spaced linearly (training steps)
    assert not use_log_scale([0.0, 0.1, 1.0, 10.0]) and not use_log_scale([0.5, 1.0, 1.5])


def test_gap_where_zero_masks_only_where_the_norm_is_zero():
    frame = pd.DataFrame({"step": [0, 0, 1, 1, 0, 1], "seed": [0, 0, 0, 0, 1, 1],
                          "metric": ["cos", "norm", "cos", "norm", "cos", "cos"], "value": [0.0, 0.0, 0.5, 2.0, 0.3, 0.7]})
    out = gap_where_zero(frame, "cos", "norm")
    assert np.isnan(out["value"][0]) and out["value"].tolist()[1:] == frame["value"].tolist()[1:]


def test_palette_colours_are_distinct():
    for n in (3, 10, 14):
        assert len(set(palette(n))) == n


def test_the_checker_catches_each_violation():
    fig, axes = panel_grid(2)
    good, bad = axes[0, 0], axes[0, 1]
    good.plot([1, 2, 3], [1, 2, 3], label="a")
    good.set_xlabel("x (m)")
    good.set_ylabel("y (s)")
    assert check_figure(fig) != () and all("axes 1" in p for p in check_figure(fig))  # the empty, unlabelled panel
    bad.plot([1, 2], [1, 2], color="C0", label="b")
    bad.plot([1, 2], [2, 1], color="C0")
    bad.plot([0.01, 0.1, 1.0], [1, 2, 3], color="C1")
    bad.legend(loc="center")
    problems = " | ".join(check_figure(fig))
    for expected in ("missing label", "share a colour", "legend covers", "should be log"):
        assert expected in problems
    plt.close(fig)
    wide, row = plt.subplots(1, 6, figsize=(2 * REPORT_WIDTH_IN, 3))
    for ax in row:
        ax.plot([0, 1], [0, 1])
        ax.set_xlabel("x")
        ax.set_ylabel("y")
    assert all(f"< {MIN_PANEL_IN} in" in p for p in check_figure(wide)) and len(check_figure(wide)) == 6
    plt.close(wide)
