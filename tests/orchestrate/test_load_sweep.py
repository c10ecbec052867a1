"""``stagewise.load_sweep`` (issue 26, section 4): a sweep folder as Python values: its index,
each point's run (points folded into one run share it), the ``sweep collect`` table (nothing
written), the claims and the metrics over points with the point's axes as columns, each equal
to what the run folders hold; a point whose run does not read is left out with a note; one
line for a folder that is not a sweep, a run folder outside it, or a symbolic link inside it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from runcache import without_run_figures

import stagewise
from stagewise import SweepView, UserError, load_run, load_sweep
from stagewise.errors import Note
from stagewise.orchestrate.collect import collect_frame
from stagewise.orchestrate.executors import ExecutorOptions
from stagewise.orchestrate.load import METRIC_COLUMNS
from stagewise.orchestrate.sweep import run_sweep
from stagewise.orchestrate.sweepplan import SweepSpec, plan
from stagewise.report.runview import CLAIM_COLUMNS

SPEC = {"lab": "ntp", "preset": "example1", "set": {"train.steps_stage1": 6, "train.steps_stage2": 10},
        "axes": {"train.lr_stage2": [0.05, 0.1], "seed": {"range": [0, 2]}}}
"""Four points folded into two runs of two seeds each."""
AXIS = "train.lr_stage2"


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    out = tmp_path_factory.mktemp("load-sweep") / "sweep"
    spec = SweepSpec.model_validate(SPEC)
    with without_run_figures(labs=("ntp",)):
        run_sweep(plan(spec), out, "ntp", opts=ExecutorOptions(kind="local", max_parallel=1), fold="seeds", axes=list(spec.axes))
    return out


@pytest.fixture
def copy(swept, tmp_path):
    return Path(shutil.copytree(swept, tmp_path / "sweep"))


def points(folder):
    return json.loads((folder / "sweep.json").read_text())["points"]


def test_index_frame_and_runs_are_what_the_folder_holds(swept):
    sweep = load_sweep(swept)
    assert isinstance(sweep, SweepView) and stagewise.load_sweep is load_sweep
    assert sweep.index == json.loads((swept / "sweep.json").read_text()) and sweep.lab == "ntp"
    assert sweep.axes == [AXIS, "seed"]
    pd.testing.assert_frame_equal(sweep.frame, collect_frame(swept)[0])
    assert not (swept / "collect").exists()  # reading writes nothing
    labels = [p["label"] for p in points(swept)]
    assert list(sweep.runs) == labels and len(sweep.runs) == 4
    by_run: dict[str, list[str]] = {}
    for point in points(swept):
        by_run.setdefault(point["run_dir"], []).append(point["label"])
        run = sweep.runs[point["label"]]
        assert run.path == swept / point["run_dir"] and set(point["seeds"]) <= set(run.seeds)
        pd.testing.assert_frame_equal(run.metrics, load_run(swept / point["run_dir"]).metrics)
    assert len(by_run) == 2 and all(len(labels) == 2 for labels in by_run.values())
    for first, second in by_run.values():
        assert sweep.runs[first] is sweep.runs[second]  # a folded run is read once
    assert repr(sweep) == f"SweepView({str(swept)!r}, lab='ntp', axes=['{AXIS}', 'seed'], 4 points, 2 runs)"
    assert sweep.point_axes["point"].tolist() == labels
    assert sweep.point_axes[AXIS].tolist() == [p["values"][AXIS] for p in points(swept)]


def test_claims_over_points_are_their_runs_claims_with_the_axes(swept):
    sweep = load_sweep(swept)
    claims = sweep.claims
    assert list(claims.columns) == ["point", "run_dir", AXIS, *CLAIM_COLUMNS]
    for point in points(swept):
        rows = claims[claims["point"] == point["label"]]
        assert (rows["run_dir"] == point["run_dir"]).all() and (rows[AXIS] == point["values"][AXIS]).all()
        summary = json.loads((swept / point["run_dir"] / "summary.json").read_text())
        assert rows["id"].tolist() == [c["id"] for c in summary["claims"]]
        assert rows["verdict"].tolist() == [c["verdict"] for c in summary["claims"]]
        pd.testing.assert_frame_equal(rows[list(CLAIM_COLUMNS)].reset_index(drop=True), sweep.runs[point["label"]].claims)
    holds = claims.groupby(AXIS)["holds"].mean()  # what a researcher does next
    assert list(holds.index) == [0.05, 0.1]


def test_metrics_over_points_are_each_points_own_seeds(swept):
    sweep = load_sweep(swept)
    metrics = sweep.metrics
    assert list(metrics.columns) == ["point", "run_dir", AXIS, *METRIC_COLUMNS]
    for point in points(swept):
        rows = metrics[metrics["point"] == point["label"]]
        assert set(rows["seed"]) == set(point["seeds"]) and (rows[AXIS] == point["values"][AXIS]).all()
        run = load_run(swept / point["run_dir"]).metrics
        own = run[run["seed"].isin(point["seeds"])].reset_index(drop=True)
        pd.testing.assert_frame_equal(rows[list(METRIC_COLUMNS)].reset_index(drop=True), own)
    runs = {p["run_dir"] for p in points(swept)}
    assert len(metrics) == sum(len(load_run(swept / r).metrics) for r in runs)  # folded seeds split, none twice
    loss = metrics[metrics.metric == "train.loss"].pivot_table(index="step", columns=[AXIS, "seed"], values="value")
    assert loss.shape[1] == 4


def test_a_point_whose_run_does_not_read_is_left_out_with_a_note(copy):
    gone = points(copy)[0]
    shutil.rmtree(copy / gone["run_dir"])
    sweep = load_sweep(copy)
    with pytest.raises(UserError, match="not a run directory"):
        sweep.runs[gone["label"]]
    with pytest.warns(Note, match=rf"2 point\(s\) left out, their run does not read: {gone['label']}"):
        claims = sweep.claims
    assert set(claims["point"]) == {p["label"] for p in points(copy) if p["run_dir"] != gone["run_dir"]}
    assert (sweep.frame[sweep.frame["run_dir"] == gone["run_dir"]]["status"] == "missing").all()


def test_an_axis_named_like_a_metrics_column_is_namespaced(copy):
    index = json.loads((copy / "sweep.json").read_text())
    index["axes"].append("value")
    for i, point in enumerate(index["points"]):
        point["values"]["value"] = i
    (copy / "sweep.json").write_text(json.dumps(index))
    metrics = load_sweep(copy).metrics
    assert list(metrics.columns) == ["point", "run_dir", AXIS, "axis.value", *METRIC_COLUMNS]
    assert sorted(set(metrics["axis.value"])) == [0, 1, 2, 3]


def test_not_a_sweep_folder_is_one_line(swept, tmp_path):
    with pytest.raises(UserError, match=rf"^{tmp_path}: not a sweep folder \(no sweep\.json\)$"):
        load_sweep(tmp_path)
    with pytest.raises(UserError, match=rf"^{swept}: not a run directory \(no manifest\.json; it is a sweep folder"):
        load_run(swept)


@pytest.mark.parametrize("run_dir", ["../elsewhere", "/tmp"])
def test_a_run_folder_outside_the_sweep_is_refused(copy, run_dir):
    index = json.loads((copy / "sweep.json").read_text())
    index["points"][1]["run_dir"] = run_dir
    (copy / "sweep.json").write_text(json.dumps(index))
    with pytest.raises(UserError, match=rf"point '{index['points'][1]['label']}': run_dir '{run_dir}' is not inside the sweep"):
        load_sweep(copy)


def test_a_symbolic_link_inside_the_sweep_is_refused(copy, tmp_path):
    run_dir = copy / points(copy)[0]["run_dir"]
    shutil.move(run_dir / "config.yaml", tmp_path / "config.yaml")
    (run_dir / "config.yaml").symlink_to(tmp_path / "config.yaml")
    with pytest.raises(UserError, match=rf"{run_dir / 'config.yaml'}: is a symbolic link"):
        load_sweep(copy)
