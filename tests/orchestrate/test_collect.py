"""`sweep collect`: one row per (point, seed) with the axes, the summaries' per-seed values,
stage onsets and run-level claims; failed runs marked; Parquet round trip; a folded index
gives the rows of the unfolded sweep; figures written; report-spec errors (claims checked
against the lab's); the claims' measured values per seed; the sweep figures on a synthetic
table, onsets only of stages some run reached."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import shutil

import pandas as pd
import pytest

from stagewise.errors import RenamedMetric, UserError
from stagewise.labs import registry
from stagewise.labs.ntp.lab import METRIC_ALIASES
from stagewise.labs.ntp.summary import ALIGNED
from stagewise.orchestrate.collect import check_report_spec, collect, collect_frame, stage_columns
from stagewise.orchestrate.sweepplot import figure_plan
from stagewise.orchestrate.sweep import run_local
from stagewise.orchestrate.sweepplan import SweepSpec, plan
from stagewise.report.claims import read_summary
from stagewise.report.sweepfigs import condition, metric_vs_axis, onset_vs_axis, phase_cells, phase_diagram

# plain GD with lr_stage1 = lr_stage2 = 1e308 overflows the weights at the first stage-2 step: that point diverges
BASE = {"lab": "ntp", "preset": "example1",
        "set": {"train.steps_stage1": 6, "train.steps_stage2": 10, "train.optimizer": "gd", "n_seeds": 2}}
AXES = {"axes": {"train.lr_stage1": [1.0, 1.0e308], "train.lr_stage2": [0.5, 1.0e308]}, "zip": [["train.lr_stage1", "train.lr_stage2"]]}
REPORT = {"metrics": ["train.loss"], "phase": [{"x": "train.lr_stage1", "y": "train.lr_stage2", "value": "claims_all_hold"}],
          "onsets": [{"stage": "wov_aligned", "axis": "train.lr_stage1"}]}


@contextlib.contextmanager
def no_run_figures():
    """The runs' own figures are not what is tested here (and are most of a tiny run's time)."""
    lab = registry.REGISTRY["ntp"]  # loaded, so the registry's cache holds it
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(registry.REGISTRY._labs, "ntp", dataclasses.replace(lab, make_figures=lambda *a: []))
        yield


def sweep(out, spec):
    points = plan(SweepSpec.model_validate(spec))
    with no_run_figures():
        run_local(points, out, spec["lab"], max_parallel=1)
    return points


def set_report(out, report):
    index = json.loads((out / "sweep.json").read_text())
    index["report"] = report
    (out / "sweep.json").write_text(json.dumps(index))


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    out = tmp_path_factory.mktemp("collect") / "a"
    sweep(out, {**BASE, **AXES})
    set_report(out, REPORT)
    return out, collect(out)


def test_rows_axes_finals_stages_and_claims(swept):
    out, got = swept
    index = json.loads((out / "sweep.json").read_text())
    frame = got.frame
    assert len(frame) == sum(len(p["seeds"]) for p in index["points"]) == 4
    assert (got.n_points, got.n_runs, got.n_failed) == (2, 2, 1)
    for point in index["points"]:
        rows = frame[frame["point"] == point["label"]]
        assert rows["seed"].tolist() == point["seeds"]
        for axis, value in point["values"].items():
            assert (rows[axis] == value).all()
        manifest = json.loads((out / point["run_dir"] / "manifest.json").read_text())
        assert (rows["status"] == manifest["status"]).all()
        if manifest["status"] != "done":
            assert manifest["status"] == "diverged" and (rows["error"] == manifest["error"]).all()
            metric_cols = [c for c in frame if c.startswith(("final.", "stage.", "claim.", "claims_"))]
            assert rows[metric_cols].isna().all().all()
            continue
        summary = read_summary(out / point["run_dir"] / "summary.json")
        stages = summary.details["stage_detection"]["stages"]
        assert set(stages) == {"stage2_start", "wov_aligned", "wkq_aligned"}
        for _, row in rows.iterrows():
            per_seed = summary.per_seed[str(row["seed"])]
            assert {f"final.{k}" for k in per_seed} <= set(frame.columns)
            for name, value in per_seed.items():
                assert row[f"final.{name}"] == pytest.approx(value, rel=0, abs=0)
            for name, stage in stages.items():
                step = stage["per_seed"][str(row["seed"])]
                assert (math.isnan(row[f"stage.{name}"]) if step is None else row[f"stage.{name}"] == step)
            assert row["stage.stage2_start"] == BASE["set"]["train.steps_stage1"] + 1
            for c in summary.claims:
                assert (row[f"claim.{c.id}"] is pd.NA) if c.holds is None else (row[f"claim.{c.id}"] == c.holds)
                value = c.per_seed.get(str(row["seed"]), c.value) if c.per_seed else c.value
                assert math.isnan(row[f"claim_value.{c.id}"]) if value is None else row[f"claim_value.{c.id}"] == value
            testable = [c.holds for c in summary.claims if c.holds is not None]
            assert row["claims_all_hold"] == all(testable)
            assert row["claims_holding_fraction"] == pytest.approx(sum(testable) / len(testable))
            assert row["claims_over_seeds"] == len(summary.seeds) == 2
    assert str(frame["claim.stage1_direction"].dtype) == "boolean"


def test_parquet_round_trip_and_recollect_is_idempotent(swept):
    out, got = swept
    pd.testing.assert_frame_equal(pd.read_parquet(got.table), got.frame)
    before = got.table.read_bytes()
    again = collect_frame(out)[0]
    pd.testing.assert_frame_equal(again, got.frame)
    assert got.table.read_bytes() == before


def test_figures_are_written_and_stale_ones_removed(swept):
    out, got = swept
    names = sorted(p.name for p in got.figures)
    assert names == sorted(["final.train.loss_vs_train.lr_stage1.png",  # lr_stage2 is zipped with lr_stage1: not drawn again
                            "phase_claims_all_hold_over_train.lr_stage1_x_train.lr_stage2.png",
                            "onset_stage.wov_aligned_vs_train.lr_stage1.png"])
    for png in got.figures:
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.with_suffix(".pdf").read_bytes()[:4] == b"%PDF"
    assert got.warnings == []
    set_report(out, {"metrics": ["train.loss", "no_such_metric"], "phase": [], "onsets": []})
    fewer = collect(out)
    assert [p.name for p in fewer.figures] == ["final.train.loss_vs_train.lr_stage1.png"]
    assert sorted(p.name for p in (out / "collect" / "figures").iterdir()) == sorted(
        [p.name for p in fewer.figures] + [p.with_suffix(".pdf").name for p in fewer.figures])
    assert len(fewer.warnings) == 1 and "no_such_metric" in fewer.warnings[0]
    set_report(out, REPORT)


def test_a_folded_index_gives_the_rows_of_the_unfolded_sweep(swept, tmp_path):
    out, _ = swept
    unfolded = tmp_path / "u"
    single = {**BASE, "set": {**BASE["set"], "n_seeds": 1, "train.lr_stage1": 1.0, "train.lr_stage2": 0.5}, "axes": {"seed": [0, 1]}}
    points = sweep(unfolded, single)
    folded = tmp_path / "f"
    index = json.loads((out / "sweep.json").read_text())
    done = next(p for p in index["points"] if p["values"]["train.lr_stage1"] == 1.0)
    shutil.copytree(out / done["run_dir"], folded / done["run_dir"])
    entries = [{"label": p.label, "values": p.values, "hash": p.hash, "run_dir": done["run_dir"], "seeds": [p.values["seed"]]}
               for p in points]
    (folded / "sweep.json").write_text(json.dumps({"lab": "ntp", "axes": ["seed"], "points": entries}))
    a, b = collect_frame(folded)[0], collect_frame(unfolded)[0]
    assert a["claims_over_seeds"].tolist() == [2, 2] and b["claims_over_seeds"].tolist() == [1, 1]
    same = ["point", "hash", "status", "seed"] + [c for c in b if c.startswith(("final.", "stage."))]
    assert set(same) <= set(a.columns)
    pd.testing.assert_frame_equal(a[same], b[same])


def test_missing_and_unreadable_runs(tmp_path):
    points = [{"label": "x=1", "values": {"x": 1}, "hash": "h1", "run_dir": "runs/h1", "seeds": [3, 4]},
              {"label": "x=2", "values": {"x": 2, "seed": 7}, "hash": "h2", "run_dir": "runs/h2"},
              {"label": "x=3", "values": {"x": 3}, "hash": "h3", "run_dir": "runs/h3"}]
    (tmp_path / "runs" / "h3").mkdir(parents=True)
    (tmp_path / "runs" / "h3" / "config.yaml").write_text("seed: 10\nn_seeds: 2\n")
    (tmp_path / "sweep.json").write_text(json.dumps({"lab": "ntp", "points": points}))
    got = collect(tmp_path)
    assert got.frame["status"].tolist() == ["missing"] * 5
    assert got.frame["seed"].tolist() == [3, 4, 7, 10, 11]
    assert got.frame["x"].tolist() == [1, 1, 2, 3, 3] and (got.n_runs, got.n_failed) == (3, 3)
    assert got.frame["error"].str.contains("no manifest.json|no such directory").all()
    pd.testing.assert_frame_equal(pd.read_parquet(got.table), got.frame)
    with pytest.raises(UserError, match="not a sweep folder"):
        collect(tmp_path / "runs")


def test_stage_columns_naming():
    report = {"order": ["a"], "stages": {"a": {"per_seed": {"0": 5.0, "1": None}}}}
    details = {"stage_detection": report, "variants": {"v1": {"stage_detection": report}, "other": {"x": 1}},
               "again": report, "not": {"order": [], "stages": {"b": 1}}}
    cols = stage_columns(details)
    assert list(cols) == ["stage.a", "stage.variants.v1.a", "stage.again.a"]
    assert cols["stage.a"][0] == 5.0 and math.isnan(cols["stage.a"][1])


@pytest.mark.parametrize("report, message", [
    ([1], "expected a mapping"),
    ({"metric": []}, "unknown key 'metric'"),
    ({"metrics": "loss"}, "metrics='loss'"),
    ({"phase": [{"x": "a", "y": "b"}]}, r"phase\[0\].*exactly the keys x, y, value"),
    ({"phase": [{"x": "a", "y": "zz", "value": "v"}]}, r"phase\[0\].y='zz': not an axis of the sweep; axes: a, b"),
    ({"phase": [{"x": "a", "y": "a", "value": "v"}]}, "x and y are both 'a'"),
    ({"phase": [{"x": "a", "y": "b", "value": "final.loss<=small"}]}, "is not a number"),
    ({"onsets": [{"stage": "s", "axis": "c"}]}, r"onsets\[0\].axis='c': not an axis"),
    ({"onsets": [{"stage": 3, "axis": "a"}]}, r"onsets\[0\].stage=3: expected a non-empty string"),
    ({"claims": "cos_wkq_to_one"}, "claims='cos_wkq_to_one': expected a list of claim ids"),
    ({"claims": [""]}, "claims=.*expected a list of claim ids"),
])
def test_check_report_spec_errors(report, message):
    with pytest.raises(UserError, match=message) as err:
        check_report_spec(report, ["a", "b"])
    assert len(err.value.messages) == 1


def test_report_claims_must_be_claims_of_the_lab():
    ids = [c.id for c in registry.REGISTRY["ntp"].claims]
    check_report_spec({"claims": [ids[0], f"{ids[0]}_case"]}, ["a"], lab="ntp")  # a declared id and a case of it
    with pytest.raises(UserError, match="'no_such_claim' is not a claim of the lab; claims: ") as err:
        check_report_spec({"claims": [ids[0], "no_such_claim"]}, ["a"], lab="ntp")
    assert len(err.value.messages) == 1 and "\n" not in err.value.messages[0]


def test_check_report_spec_accepts_a_good_spec():
    check_report_spec({"metrics": ["loss"], "phase": [{"x": "a", "y": "b", "value": "final.loss <= 0.3"}],
                       "onsets": [{"stage": "wkq_aligned", "axis": "a"}]}, ["a", "b", "seed"])
    check_report_spec({}, [])


# ---------------------------------------------------------------- synthetic table figures
def synthetic() -> pd.DataFrame:
    """eta in {0.01, 1}, noise in {0, 0.1}, 3 seeds each; (eta=1, noise=0.1): every run failed;
    (eta=0.01, noise=0.1): one failed seed, two finished with loss 0.2 and 0.5."""
    rows = []
    for eta in (0.01, 1.0):
        for noise in (0.0, 0.1):
            for seed in range(3):
                failed = (eta == 1.0 and noise == 0.1) or (eta == 0.01 and noise == 0.1 and seed == 2)
                loss = math.nan if failed else 0.1 * (seed + 1) + (0.3 if noise else 0.0) * (seed % 2 + 0.0)
                onset = math.nan if failed or seed == 0 and eta == 1.0 else 10.0 * (seed + 1)
                rows.append({"status": "diverged" if failed else "done", "seed": seed, "eta": eta, "noise": noise,
                             "final.loss": loss, "stage.s": onset,
                             "claim.c": pd.NA if failed else bool(seed != 1)})
    frame = pd.DataFrame(rows)
    frame["claim.c"] = frame["claim.c"].astype("boolean")
    return frame


def texts(fig) -> list[str]:
    return [t.get_text() for ax in fig.axes for t in ax.texts]


def test_phase_diagram_counts_seeds_per_cell():
    frame = synthetic()
    cells = phase_cells(frame, "eta", "noise", "claim.c").set_index(["x", "y"])
    assert (cells.loc[(0.01, 0.0), ["k", "n", "failed"]].tolist()) == [2, 3, 0]
    assert (cells.loc[(0.01, 0.1), ["k", "n", "failed"]].tolist()) == [1, 2, 1]
    assert cells.loc[(1.0, 0.1), "label"] == "failed" and math.isnan(cells.loc[(1.0, 0.1), "fraction"])
    expr = phase_cells(frame, "eta", "noise", "final.loss<=0.25").set_index(["x", "y"])
    finished = frame[(frame["status"] == "done") & (frame["eta"] == 0.01) & (frame["noise"] == 0.1)]
    assert expr.loc[(0.01, 0.1), "k"] == int((finished["final.loss"] <= 0.25).sum())
    fig = phase_diagram(frame, "eta", "noise", "claim.c")
    labels = texts(fig)
    assert "2/3" in labels and "1/2\n1 failed" in labels and "failed" in labels
    absent = frame[~((frame["eta"] == 1.0) & (frame["noise"] == 0.0))]
    assert "none" in texts(phase_diagram(absent, "eta", "noise", "claim.c"))


def test_condition_keeps_unknown_rows_unknown():
    frame = synthetic()
    holds = condition(frame, "final.loss>0.15")
    assert str(holds.dtype) == "boolean"
    assert holds.isna().tolist() == frame["final.loss"].isna().tolist()
    known = frame["final.loss"].notna()
    assert holds[known].tolist() == (frame.loc[known, "final.loss"] > 0.15).tolist()
    with pytest.raises(KeyError):
        condition(frame, "final.nothing<1")


def test_metric_and_onset_figures():
    frame = synthetic()
    fig = metric_vs_axis(frame, "final.loss", "eta", by=["noise"])
    ax = fig.axes[0]
    assert ax.get_xscale() == "log"  # 0.01 .. 1 spans 100x
    assert "4 failed rows excluded" in ax.get_title()
    lines = {line.get_label(): line.get_xydata() for line in ax.lines}  # mean lines, one per noise level
    done = frame[frame["status"] == "done"]
    for (noise, eta), rows in done.groupby(["noise", "eta"]):
        xy = lines[f"noise={noise:.3g}"]
        assert xy[xy[:, 0] == eta, 1] == pytest.approx([rows["final.loss"].mean()])
    linear = metric_vs_axis(frame[frame["eta"] == 0.01], "final.loss", "noise")
    assert linear.axes[0].get_xscale() == "linear"
    onset = onset_vs_axis(frame, "stage.s", "eta")
    never = int(((frame["status"] == "done") & frame["stage.s"].isna()).sum())
    assert f"{never} finished rows never reach it" in onset.axes[0].get_title()
    assert f"{never} never" in texts(onset)


def test_onsets_only_of_reached_stages_the_others_named():
    frame = synthetic().assign(**{"stage.z": math.nan})  # z: reached by no run
    index = {"lab": None, "axes": ["eta", "noise"], "report": {"metrics": [], "phase": []}}
    plan_, warnings = figure_plan(frame, index)
    names = [name for name, _ in plan_]
    assert "onset_stage.s_vs_eta" in names and not any("stage.z" in n for n in names) and warnings == []
    fig = dict(plan_)["onset_stage.s_vs_eta"]()
    assert "never reached by any run: z" in fig.axes[0].get_title()
    asked = figure_plan(frame, {**index, "report": {**index["report"], "onsets": [{"stage": "z", "axis": "eta"}]}})
    assert not any("onset" in n for n, _ in asked[0]) and "reached by no run" in asked[1][0]


def test_default_figure_plan(swept):
    out, got = swept
    index = {**json.loads((out / "sweep.json").read_text()), "report": {}}
    names = [name for name, _ in figure_plan(got.frame, index)[0]]
    metrics = ["final.train.loss", "final.test.acc.covered", "final.W_kq.cos_target", "final.W_ov.cos_target", "claims_holding_fraction"]
    stages = [s for s in ("stage2_start", "wov_aligned", "wkq_aligned") if got.frame[f"stage.{s}"].notna().any()]
    # lr_stage2 is zipped one-to-one with lr_stage1: one axis to draw, so no phase diagram by default
    assert names == [f"{m}_vs_train.lr_stage1" for m in metrics] + [f"onset_stage.{s}_vs_train.lr_stage1" for s in stages]
    grid = pd.concat([got.frame.assign(**{"train.lr_stage2": v}) for v in (0.5, 0.7)], ignore_index=True)  # lr_stage1 x lr_stage2
    names = [name for name, _ in figure_plan(grid, index)[0]]
    assert "phase_claims_all_hold_over_train.lr_stage1_x_train.lr_stage2" in names
    assert {f"{m}_vs_{a}" for m in metrics for a in ("train.lr_stage1", "train.lr_stage2")} <= set(names)


# ------------------------------------------------------------------ old metric names (Lab.metric_aliases)
OLD_NAMES = {new: old for old, new in METRIC_ALIASES.items()}  # the NTP lab's names today -> before the rename


def test_runs_summarized_before_a_metric_rename_collect_as_new_ones(swept, tmp_path):
    """A sweep whose summaries carry the NTP lab's old metric names (``per_seed`` and ``final``
    keys) gives the table a sweep of today's runs gives: ``final.*`` under the current names."""
    out, _ = swept
    old = tmp_path / "old"
    shutil.copytree(out, old)
    summaries = sorted(old.rglob("summary.json"))
    for path in summaries:
        summary = json.loads(path.read_text())
        summary["final"] = {OLD_NAMES.get(k, k): v for k, v in summary["final"].items()}
        summary["per_seed"] = {s: {OLD_NAMES.get(k, k): v for k, v in row.items()} for s, row in summary["per_seed"].items()}
        path.write_text(json.dumps(summary))
    assert summaries and "cos_wkq" in json.loads(summaries[0].read_text())["per_seed"]["0"]  # the case this test is about
    pd.testing.assert_frame_equal(collect_frame(old)[0], collect_frame(out)[0], check_exact=True)


def test_old_metric_names_in_a_sweep_report_are_read_with_a_note(swept):
    out, got = swept
    index = json.loads((out / "sweep.json").read_text())

    def report(loss: str, cos: str) -> dict:
        return {"metrics": [loss, f"final.{cos}"], "onsets": [],
                "phase": [{"x": "train.lr_stage1", "y": "train.lr_stage2", "value": f"final.{cos}>={ALIGNED}"}]}

    want, warnings = figure_plan(got.frame, {**index, "report": report("train.loss", "W_kq.cos_target")})
    assert warnings == [] and len(want) == 3
    with pytest.warns(RenamedMetric) as notes:
        plan_, warnings = figure_plan(got.frame, {**index, "report": report("loss", "cos_wkq")})
    assert [name for name, _ in plan_] == [name for name, _ in want] and warnings == []
    assert {str(n.message).split(" (")[0] for n in notes} == {"loss is now train.loss", "cos_wkq is now W_kq.cos_target"}
