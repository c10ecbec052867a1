"""The comparison experiment (compare: two-stage NGD vs joint, Adam, AdamW on the same data
and seeds): variant records equal separate runs, a resume inside any variant equals the
uninterrupted run, and the comparison claims are computed from the records."""

from __future__ import annotations

import json
from dataclasses import replace

import pandas as pd
import pytest

from stagewise.config import resolve
from stagewise.labs import get_lab
from stagewise.labs.ntp.claims import compare_claims
from stagewise.labs.ntp.compare import variant_finals, variant_frame
from stagewise.orchestrate import execute, prepare

from resume_helpers import crash_then_resume

LAB = replace(get_lab("ntp"), make_figures=lambda *a, **k: [])
SMALL = {"n_seeds": 2, "data": {"vocab_size": 6}, "train": {"steps_stage1": 20, "steps_stage2": 40, "threads": 1,
                                                              "checkpoint_every": 15}}


def run_dir(tmp_path, name, over):
    config = resolve(LAB.Config, {**SMALL, **over})
    paths = prepare(LAB, config, tmp_path / name)
    execute(LAB, config, paths, progress=False)
    return config, paths


@pytest.fixture(scope="module")
def compared(tmp_path_factory):
    return run_dir(tmp_path_factory.mktemp("c"), "cmp", {"compare": ["two_stage", "joint", "adam", "adamw"]})


@pytest.mark.parametrize("variant,train", [("two_stage", {}), ("joint", {"algorithm": "joint"}), ("adamw", {"optimizer": "adamw"})])
def test_each_variant_equals_its_own_run(compared, tmp_path, variant, train):
    _, paths = compared
    frame = variant_frame(pd.read_parquet(paths.metrics), variant).drop(columns="variant").reset_index(drop=True)
    _, single = run_dir(tmp_path, variant, {"train": {**SMALL["train"], **train}})
    alone = pd.read_parquet(single.metrics).drop(columns="variant").reset_index(drop=True)
    pd.testing.assert_frame_equal(frame, alone, check_exact=True)


def test_compare_claims_and_details(compared):
    config, paths = compared
    summary = json.loads(paths.summary.read_text())
    ids = [c["id"] for c in summary["claims"]]
    assert ids[:4] == ["compare_wkq_two_stage_vs_joint", "compare_wov_two_stage_vs_joint", "compare_wkq_ngd_vs_adam",
                       "compare_norm_adamw_below_adam"]
    assert {"two_stage/late_rate_margin", "adam/norm_band_theorem1", "joint/cos_wkq_to_one"} <= set(ids)
    assert set(summary["details"]["compare"]) == {"two_stage", "joint", "adam", "adamw"}
    frame = pd.read_parquet(paths.metrics)
    assert set(frame["variant"]) == {"two_stage", "joint", "adam", "adamw"}
    # falsifiable: swap the two-stage and joint records and the direction claims fail
    swapped = frame.copy()
    swapped["metric"] = swapped["metric"].str.replace("^two_stage/", "tmp/", regex=True)
    swapped["metric"] = swapped["metric"].str.replace("^joint/", "two_stage/", regex=True).str.replace("^tmp/", "joint/", regex=True)
    before = {c.id: c.holds for c in compare_claims(variant_finals(config, frame))}
    after = {c.id: c.holds for c in compare_claims(variant_finals(config, swapped))}
    assert before["compare_wov_two_stage_vs_joint"] is True and after["compare_wov_two_stage_vs_joint"] is False


def test_compare_without_a_variant_is_null(tmp_path):
    config = resolve(LAB.Config, {**SMALL, "compare": ["two_stage", "adam"]})
    _, paths = run_dir(tmp_path, "two", {"compare": ["two_stage", "adam"]})
    claims = {c["id"]: c for c in json.loads(paths.summary.read_text())["claims"]}
    assert claims["compare_wkq_two_stage_vs_joint"]["holds"] is None and "joint" in claims["compare_wkq_two_stage_vs_joint"]["reason"]
    assert config.compare == ["two_stage", "adam"]


@pytest.mark.parametrize("crash_at_line", [5, 140])
def test_resume_inside_a_variant_equals_uninterrupted(compared, tmp_path, monkeypatch, crash_at_line):
    config, ref_paths = compared
    reference = pd.read_parquet(ref_paths.metrics)
    paths = crash_then_resume(LAB, config, tmp_path / "crash", monkeypatch, crash_at_line)
    pd.testing.assert_frame_equal(pd.read_parquet(paths.metrics), reference, check_exact=True)
