"""Sweep specifications: axis forms, zip, expansion order, validation before any run, and
equality of a point's config with the same settings given to `stagewise run`."""

from __future__ import annotations

import numpy as np
import pytest

from stagewise.config import resolve
from stagewise.errors import UserError
from stagewise.labs import get_lab, spec_config, spec_hash
from stagewise.orchestrate.sweepplan import SweepSpec, axis_values, expand, load_sweep, plan


def sweep(**kw) -> SweepSpec:
    return SweepSpec.model_validate({"lab": "ntp", "preset": "example1", **kw})


def test_axis_forms():
    assert axis_values("seed", {"range": [0, 3]}) == [0, 1, 2]
    assert axis_values("seed", {"range": [10, 0, -5]}) == [10, 5]
    assert np.allclose(axis_values("train.lr_stage2", {"logrange": [0.01, 1.0, 3]}), [0.01, 0.1, 1.0])
    draws = axis_values("train.lr_stage2", {"random": "loguniform", "low": 1e-3, "high": 1e-1, "n": 50, "seed": 3})
    assert draws == axis_values("train.lr_stage2", {"random": "loguniform", "low": 1e-3, "high": 1e-1, "n": 50, "seed": 3})
    assert all(1e-3 <= v <= 1e-1 for v in draws) and len(set(draws)) == 50
    ints = axis_values("seed", {"random": "int", "low": 0, "high": 4, "n": 200})
    assert set(ints) == {0, 1, 2, 3, 4}


@pytest.mark.parametrize("form,needle", [
    ([], "sweep axis x: empty list"),
    ({"range": [0, 2.5]}, "sweep axis x: range=[0, 2.5]"),
    ({"range": [3, 3]}, "is empty"),
    ({"logrange": [0, 1, 3]}, "sweep axis x: logrange=[0, 1, 3]"),
    ({"random": "loguniform", "low": 0, "high": 1, "n": 2}, "loguniform needs low > 0"),
    ({"random": "gauss", "low": 0, "high": 1, "n": 2}, "sweep axis x: random"),
    ({"grid": [1]}, "unknown form ['grid']"),
    (3, "expected a list"),
])
def test_bad_axis_forms_are_one_line(form, needle):
    with pytest.raises(UserError) as err:
        axis_values("x", form)
    assert len(err.value.messages) == 1 and needle in err.value.messages[0]


def test_expansion_order_and_zip():
    spec = sweep(axes={"train.lr_stage2": [0.1, 0.2], "seed": {"range": [0, 3]}, "train.lr_stage1": [1.0, 2.0]},
                 zip=[["train.lr_stage2", "train.lr_stage1"]])
    points = expand(spec)
    assert len(points) == 2 * 3
    assert points[:3] == [{"train.lr_stage2": 0.1, "train.lr_stage1": 1.0, "seed": s} for s in range(3)]
    assert points[3] == {"train.lr_stage2": 0.2, "train.lr_stage1": 2.0, "seed": 0}
    with pytest.raises(UserError, match="equal lengths"):
        expand(sweep(axes={"train.lr_stage2": [0.1, 0.2], "train.lr_stage1": [1.0]}, zip=[["train.lr_stage2", "train.lr_stage1"]]))
    with pytest.raises(UserError, match="'seed' is not an axis"):
        expand(sweep(axes={"train.lr_stage2": [0.1]}, zip=[["train.lr_stage2", "seed"]]))


def test_points_equal_the_same_settings_given_to_run(tmp_path):
    lab = get_lab("ntp")
    (tmp_path / "base.yaml").write_text("train:\n  steps_stage2: 40\n")
    (tmp_path / "sweep.yaml").write_text(
        "lab: ntp\npreset: example1\nconfig: base.yaml\nset: {train.steps_stage1: 20}\n"
        "axes:\n  train.lr_stage2: [0.01, 0.02]\n  seed: {range: [0, 2]}\n")
    points = plan(load_sweep(tmp_path / "sweep.yaml"))
    assert [p.label for p in points] == ["train.lr_stage2=0.01,seed=0", "train.lr_stage2=0.01,seed=1",
                                         "train.lr_stage2=0.02,seed=0", "train.lr_stage2=0.02,seed=1"]
    for p in points:
        direct = resolve(lab.Config, lab.preset_overrides("example1"), tmp_path / "base.yaml",
                         ["train.steps_stage1=20", f"train.lr_stage2={p.values['train.lr_stage2']}", f"seed={p.values['seed']}"])
        assert spec_config(p.spec) == direct and p.hash == spec_hash(p.spec)
    assert len({p.hash for p in points}) == 4


@pytest.mark.parametrize("kw,needle", [
    ({"axes": {"trian.eta": [0.1]}}, "sweep axis trian.eta: unknown key 'trian'"),
    ({"set": {"train.etaa": 1}}, "sweep set train.etaa: unknown key 'etaa'"),
    ({"axes": {"train.lr_stage2": [0.1, -1.0]}}, "sweep point train.lr_stage2=-1: "),
    ({"lab": "nope"}, "unknown lab 'nope'"),
    ({"preset": "papr"}, "papr"),
])
def test_bad_points_fail_before_anything_runs(kw, needle):
    with pytest.raises(UserError) as err:
        plan(sweep(**kw))
    assert len(err.value.messages) == 1 and needle in err.value.messages[0], err.value.messages


def test_bad_sweep_file(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("lab: ntp\naxes: {seed: [0]}\nengine: ray\n")
    with pytest.raises(UserError, match="engine: Extra inputs are not permitted"):
        load_sweep(path)
    path.write_text("lab: ntp\naxes: {seed: [0]}\nexecutor: {kind: dask}\n")
    with pytest.raises(UserError, match="executor.kind: Input should be 'local', 'ray' or 'slurm'"):
        load_sweep(path)
    path.write_text("lab: ntp\naxes: {seed: [0]}\nexecutor: {kind: slurm, gpus_per_run: 0.5}\n")
    with pytest.raises(UserError, match="fractional GPUs need kind=ray"):
        load_sweep(path)
