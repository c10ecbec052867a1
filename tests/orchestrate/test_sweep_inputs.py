"""Sweep inputs and sweep folders (issue 15): a folder holding another sweep is refused unless
``--extend`` (then sweep.json keeps both point sets), every point's size is checked at
expansion, the point cap is checked before any value is built, bad report conditions and
random-int axes are one line, a truncated sweep.json is one line, and a refused input creates
nothing (one gate, :func:`stagewise.orchestrate.sweep.preflight`, for sweep and reproduce)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from costbudget import cpu_seconds  # this process and its reaped children: CPU, not moved by load
from stagewise.orchestrate import sweepplan
from stagewise.orchestrate.sweepplan import SweepSpec, plan

pytestmark = pytest.mark.usefixtures("no_run_figures")  # sweep folders and points are tested here, not run figures
BASE = {"lab": "ntp", "preset": "example1", "set": {"train.steps_stage1": 10, "train.steps_stage2": 20}}


def one_line(code, stderr, needle):
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and needle in lines[0], (code, lines)


def sweep_file(tmp_path: Path, name: str, **over) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({**BASE, **over}))
    return path


def labels(folder: Path) -> list[str]:
    return [p["label"] for p in json.loads((folder / "sweep.json").read_text())["points"]]


# ----------------------------------------------------------------------- sweep folders
def test_another_sweep_in_the_folder_is_refused_unless_extended(cli, tmp_path):
    first = sweep_file(tmp_path, "a", axes={"seed": [0, 1]})
    second = sweep_file(tmp_path, "b", axes={"seed": [2]})
    out = tmp_path / "out"
    code, _, err = cli("sweep", str(first), "--out", str(out), "--max-parallel", "1", "--no-collect")
    assert code == 0, err
    before = (out / "sweep.json").read_bytes()
    code, _, err = cli("sweep", str(second), "--out", str(out), "--max-parallel", "1")
    one_line(code, err, "--extend")
    assert (out / "sweep.json").read_bytes() == before  # nothing overwritten
    assert sorted(p.name for p in (out / "runs").iterdir()) == sorted(json.loads(before)["points"][i]["hash"]
                                                                      for i in range(2))
    code, _, err = cli("sweep", str(second), "--out", str(out), "--max-parallel", "1", "--extend", "--no-collect")
    assert code == 0, err
    assert labels(out) == ["seed=0", "seed=1", "seed=2"]
    # the first file again is the same sweep continued: every point is kept
    code, _, err = cli("sweep", str(first), "--out", str(out), "--max-parallel", "1")
    assert code == 0, err
    assert labels(out) == ["seed=0", "seed=1", "seed=2"]
    import pandas as pd

    table = pd.read_parquet(out / "collect" / "sweep.parquet")
    assert sorted(table["point"]) == ["seed=0", "seed=1", "seed=2"] and set(table["status"]) == {"done"}


def test_a_folder_of_another_lab_or_not_a_sweep_is_refused(cli, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    code, _, err = cli("sweep", str(sweep_file(tmp_path, "a", axes={"seed": [0]})), "--out", str(out))
    one_line(code, err, "not a sweep folder")
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]
    other = tmp_path / "other"
    other.mkdir()
    (other / "sweep.json").write_text(json.dumps({"lab": "disentangled", "points": []}))
    code, _, err = cli("sweep", str(sweep_file(tmp_path, "b", axes={"seed": [0]})), "--out", str(other), "--extend")
    one_line(code, err, "disentangled lab")


def test_truncated_or_malformed_sweep_json_is_one_line(cli, tmp_path):
    for name, text in [("cut", '{"lab": "ntp", "points": [{"lab'), ("shape", '{"lab": "ntp", "points": [1]}'),
                       ("bytes", b"\xff\xfe".decode("latin-1"))]:
        folder = tmp_path / name
        folder.mkdir()
        (folder / "sweep.json").write_text(text)
        code, _, err = cli("sweep", "collect", str(folder))
        one_line(code, err, "sweep.json")
        assert sorted(p.name for p in folder.iterdir()) == ["sweep.json"]




HOSTILE = [  # (change to a valid index, the field the one line names)
    (lambda d: d.update(axes="x"), "axes"), (lambda d: d.update(report=[1]), "report"),
    (lambda d: d["points"][0].update(values=5), "points.0.values"), (lambda d: d["points"][0].update(seeds="a"), "points.0.seeds"),
    (lambda d: d.update(log_axes=3), "log_axes"), (lambda d: d.update(fold=[]), "fold"),
    (lambda d: d["points"][0].update(label=7), "points.0.label"), (lambda d: d.update(lab=["ntp"]), "lab"),
    (lambda d: (d.update(axes=["point", "status"]), d["points"][0].update(values={"point": 1, "status": 2})), "collide"),
    (lambda d: d["points"][0].update(values={"final.loss": 1}), "collide"),
]


@pytest.mark.parametrize("change, field", HOSTILE, ids=[f"{i}-{f}" for i, (_, f) in enumerate(HOSTILE)])
def test_a_hostile_sweep_json_is_one_line_in_collect_and_report(cli, tmp_path, change, field):
    """A hand-edited sweep.json with a wrong type where a list, mapping or string belongs, or an axis named like a
    column of the collected table, is one line naming the field in `sweep collect` and `report`, nothing written."""
    index = {"lab": "ntp", "axes": ["seed"], "log_axes": [], "fold": "none", "report": {},
             "points": [{"label": "seed=0", "values": {"seed": 0}, "hash": "h0", "run_dir": "runs/h0", "seeds": [0]}]}
    change(index)
    (tmp_path / "sweep.json").write_text(json.dumps(index))
    for command in (["sweep", "collect", str(tmp_path)], ["report", str(tmp_path)]):
        code, _, err = cli(*command)
        one_line(code, err, field)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["sweep.json"]

def test_a_truncated_sweep_json_is_rebuilt_by_rerunning_the_same_sweep(cli, tmp_path):
    """Rerunning the sweep file that made a folder rebuilds an unreadable sweep.json (with a note) from this
    sweep and its run folders, without training its done runs again; a run folder this sweep does not make is
    one line and nothing is changed."""
    path = sweep_file(tmp_path, "a", axes={"seed": [0, 1]})
    out = tmp_path / "out"
    code, _, err = cli("sweep", str(path), "--out", str(out), "--max-parallel", "1", "--no-collect")
    assert code == 0, err
    whole = json.loads((out / "sweep.json").read_text())
    manifests = {p.name: (p / "manifest.json").read_bytes() for p in (out / "runs").iterdir()}
    (out / "sweep.json").write_text((out / "sweep.json").read_text()[:40])  # a truncated write
    code, _, err = cli("sweep", "collect", str(out))
    one_line(code, err, "run the sweep again (the same sweep file) to rebuild it")
    code, _, err = cli("sweep", str(path), "--out", str(out), "--max-parallel", "1", "--no-collect")
    assert code == 0, err
    assert "note:" in err and "rebuilding it from this sweep and the 2 run folder(s)" in err
    assert json.loads((out / "sweep.json").read_text())["points"] == whole["points"]
    assert {p.name: (p / "manifest.json").read_bytes() for p in (out / "runs").iterdir()} == manifests  # not run again
    (out / "sweep.json").write_text("{")
    (out / "runs" / "0123456789abcdef").mkdir()  # a run of another sweep
    code, _, err = cli("sweep", str(path), "--out", str(out), "--max-parallel", "1")
    one_line(code, err, "runs/0123456789abcdef")
    assert (out / "sweep.json").read_text() == "{"


# ---------------------------------------------------------------------------- points
def test_a_huge_point_is_refused_at_expansion_even_in_a_dry_run(cli, tmp_path):
    path = sweep_file(tmp_path, "v", preset="paper", set={}, axes={"data.vocab_size": [6, 1000000]})
    for extra in (["--dry-run"], []):
        start = cpu_seconds()
        code, _, err = cli("sweep", str(path), "--out", str(tmp_path / "o"), *extra)
        one_line(code, err, "estimated peak memory")
        assert "data.vocab_size=1000000" in err
        assert cpu_seconds() - start < 10
        assert not (tmp_path / "o").exists()


def test_the_disk_of_all_points_together_is_checked(cli, tmp_path, monkeypatch):
    import shutil
    from collections import namedtuple

    from stagewise.labs import get_lab

    path = sweep_file(tmp_path, "d", axes={"seed": {"range": [0, 10]}})
    one = get_lab("ntp").estimate(plan(SweepSpec.model_validate(yaml.safe_load(path.read_text())))[0].config())
    usage = namedtuple("usage", "total used free")
    # room for 5 runs, not for 10: the sum is what counts
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage(1 << 40, 0, int(5 * one.disk_bytes / 0.9)))
    code, _, err = cli("sweep", str(path), "--out", str(tmp_path / "o"), "--dry-run")
    one_line(code, err, "10 runs")
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("axis", [{"range": [0, 1000000000]}, {"logrange": [0.01, 1.0, 1000000000]},
                                  {"random": "uniform", "low": 0.1, "high": 0.9, "n": 1000000000}])
def test_the_point_cap_is_checked_before_values_are_built(cli, tmp_path, axis):
    start = cpu_seconds()
    code, _, err = cli("sweep", str(sweep_file(tmp_path, "h", axes={"train.lr_stage2": axis})), "--dry-run")
    one_line(code, err, f"at most {sweepplan.MAX_POINTS}")
    assert cpu_seconds() - start < 5


def test_the_cap_counts_a_zip_group_once():
    axes = {"train.lr_stage2": [0.01, 0.02, 0.03], "train.lr_stage1": [0.1, 0.2, 0.3], "seed": [0, 1]}
    spec = SweepSpec.model_validate({**BASE, "axes": axes, "zip": [["train.lr_stage2", "train.lr_stage1"]]})
    assert len(sweepplan.expand(spec)) == 6


@pytest.mark.parametrize("axis, needle", [
    ({"random": "int", "low": 0.2, "high": 0.8, "n": 3}, "need an integer in [low, high]"),
    ({"random": "int", "low": 0, "high": 1e300, "n": 3}, "2**63"),
    ({"logrange": [0.01, float("inf"), 3]}, "finite"),
])
def test_bad_random_and_logrange_axes_are_one_line(cli, tmp_path, axis, needle):
    code, _, err = cli("sweep", str(sweep_file(tmp_path, "r", axes={"seed": axis})), "--dry-run")
    one_line(code, err, needle)


def test_random_int_draws_stay_in_range():
    values = sweepplan.axis_values("seed", {"random": "int", "low": 0.5, "high": 3.5, "n": 50, "seed": 1})
    assert set(values) <= {1, 2, 3} and len(values) == 50


def test_checks_run_once_per_shape_not_once_per_seed(monkeypatch):
    import stagewise.orchestrate.runner as runner

    sizes = []
    real = runner.check_size
    monkeypatch.setattr(runner, "check_size", lambda *a, **k: (sizes.append(a[1].seed), real(*a, **k))[1])
    spec = SweepSpec.model_validate({**BASE, "axes": {"train.lr_stage2": [0.01, 0.02], "seed": {"range": [0, 50]}}})
    points = plan(spec)
    assert len(points) == 100 and sizes == [0, 0]  # one size estimate and lab check per distinct non-seed values
    assert len({p.hash for p in points}) == 100


def test_plan_is_fast_for_many_seed_points():
    spec = SweepSpec.model_validate({**BASE, "axes": {"seed": {"range": [0, 2000]}}})
    plan(spec)  # imports and caches warm
    start = cpu_seconds()
    points = plan(spec)
    per_point = (cpu_seconds() - start) / len(points)
    assert per_point < 2e-3, per_point  # the lab check alone cost about 3 ms per point before


# ------------------------------------------------------------------- report section
@pytest.mark.parametrize("value, needle", [
    ("final.loss<=nan", "not finite"),
    ("final.loss<=inf", "not finite"),
    ("final.loss=<0.3", "operator character"),
    ("final.loss => 0.3", "operator character"),
    ("loss<=0.3", "not a column of the sweep table"),
])
def test_bad_phase_conditions_are_refused_before_any_run(cli, tmp_path, value, needle):
    path = sweep_file(tmp_path, "p", axes={"train.lr_stage2": [0.01, 0.02], "seed": [0, 1]},
                      report={"phase": [{"x": "train.lr_stage2", "y": "seed", "value": value}]})
    code, _, err = cli("sweep", str(path), "--out", str(tmp_path / "o"))
    one_line(code, err, needle)
    assert not (tmp_path / "o").exists()


# ----------------------------------------------------------- refused input creates nothing
def test_refused_sweeps_create_nothing(cli, tmp_path, monkeypatch):
    out = tmp_path / "o"
    dup = sweep_file(tmp_path, "dup", axes={"seed": [0, 0]})
    code, _, err = cli("sweep", str(dup), "--out", str(out))
    one_line(code, err, "repeat another point")
    assert not out.exists()
    good = sweep_file(tmp_path, "good", axes={"seed": [0]})
    monkeypatch.setenv("STAGEWISE_SINKS", "nosuchsink")
    code, _, err = cli("sweep", str(good), "--out", str(out))
    one_line(code, err, "unknown sink")
    assert not out.exists()
    monkeypatch.delenv("STAGEWISE_SINKS")
    import stagewise.runs.sinks as sinks

    monkeypatch.setattr(sinks, "find_spec", lambda name: None)  # the sink's package is missing
    code, _, err = cli("sweep", str(good), "--out", str(out), "--sink", "tensorboard")
    one_line(code, err, "not installed")
    assert not out.exists()
    code, _, err = cli("reproduce", "ntp", "--quick", "--out", str(tmp_path / "r"), "--sink", "tensorboard")
    one_line(code, err, "not installed")
    assert not (tmp_path / "r").exists()


def test_seed_variants_of_a_shape_equal_full_validation(cli, tmp_path):
    from stagewise.config import config_hash
    from stagewise.labs import spec_config

    spec = SweepSpec.model_validate({**BASE, "axes": {"train.lr_stage2": [0.01, 0.02], "seed": [3, 0, 7]}})
    for p in plan(spec):
        full = spec_config(p.spec)  # the RunSpec validated from scratch, as a worker does
        assert p.config() == full and p.hash == config_hash(full) and p.config().seed == p.values["seed"]
    code, _, err = cli("sweep", str(sweep_file(tmp_path, "s", axes={"seed": [0, -1]})), "--dry-run")
    one_line(code, err, "sweep point seed=-1")
