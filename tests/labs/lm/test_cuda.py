"""The LM lab on CUDA (skipped without a GPU) and the GPU script of the authors' regime
(examples/gpu/authors_regime.sh, checked everywhere without running it).

On CUDA: the lab's smoke run (tiny GPT-2, CounterFact fixtures) in float32 and bfloat16
finishes with finite metrics, and float32 on the GPU scores epoch 0 (the same seeded weights,
before any update) as the CPU does.
"""

from __future__ import annotations

import copy
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from stagewise import RunSpec, execute_spec
from stagewise.config import deep_merge, resolve
from stagewise.labs import get_lab

SCRIPT = Path(__file__).resolve().parents[3] / "examples" / "gpu" / "authors_regime.sh"
REDUCED = ("counterfact-smollm2-authors-reduced", "counterfact-smollm2-authors-reduced-masked")
AUTHORS = ("counterfact-smollm2-authors", "counterfact-smollm2-authors-masked")
CATEGORIES = ("train.semantic_correct", "train.type_correct", "train.type_wrong")

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA not available")


def _smoke_run(root: Path, device: str, dtype: str) -> tuple[dict, pd.DataFrame, pd.DataFrame]:
    """(manifest, metrics, predictions) of the lm lab's smoke config on ``device`` in ``dtype``."""
    overrides = deep_merge(copy.deepcopy(dict(get_lab("lm").smoke)), {"device": device, "dtype": dtype})
    manifest = execute_spec(RunSpec(lab="lm", overrides=overrides), root, raise_on_failure=True)
    return manifest, pd.read_parquet(root / "metrics.parquet"), pd.read_parquet(root / "tables" / "predictions.parquet")


def _at_epoch(metrics: pd.DataFrame, epoch: float) -> pd.Series:
    wide = metrics.pivot_table(index="step", columns="metric", values="value").dropna(subset=["epoch"])
    return wide[wide["epoch"] == epoch].iloc[-1]


@cuda
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_smoke_run_on_cuda_finishes_with_finite_metrics(tmp_path, dtype):
    manifest, metrics, pred = _smoke_run(tmp_path / "r", "cuda", dtype)
    assert manifest["status"] == "done"
    assert np.isfinite(metrics["value"].to_numpy()).all()
    epochs = get_lab("lm").smoke["train"]["epochs"]
    assert sorted(pred["epoch"].unique()) == list(range(epochs + 1))
    assert np.isfinite(pred["answer_logprob"].to_numpy()).all()
    n = manifest["notes"]["examples"]["counterfact"]
    for epoch in range(epochs + 1):  # the three categories partition the examples at every epoch
        assert sum(_at_epoch(metrics, epoch)[c] for c in CATEGORIES) == n


@cuda
def test_float32_on_cuda_scores_epoch_0_as_the_cpu(tmp_path):
    _, on_cpu, pred_cpu = _smoke_run(tmp_path / "cpu", "cpu", "float32")
    _, on_gpu, pred_gpu = _smoke_run(tmp_path / "cuda", "cuda", "float32")
    cpu0, gpu0 = _at_epoch(on_cpu, 0), _at_epoch(on_gpu, 0)
    assert [gpu0[c] for c in CATEGORIES] == [cpu0[c] for c in CATEGORIES]
    a = pred_cpu[pred_cpu["epoch"] == 0].set_index("example_id").sort_index()
    b = pred_gpu[pred_gpu["epoch"] == 0].set_index("example_id").loc[a.index]
    assert (a["category"] == b["category"]).all()
    np.testing.assert_allclose(b["answer_logprob"].to_numpy(), a["answer_logprob"].to_numpy(), rtol=1e-4, atol=1e-4)


# ------------------------------------------------------------------ the script (everywhere)
def test_script_exists_and_is_valid_bash():
    assert SCRIPT.is_file()
    text = SCRIPT.read_text(encoding="utf-8")
    assert text.startswith("#!/usr/bin/env bash") and "set -euo pipefail" in text
    assert all(preset in text for preset in AUTHORS)
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("bash not found")
    check = subprocess.run([bash, "-n", str(SCRIPT)], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr


@pytest.mark.parametrize("preset", AUTHORS)
def test_authors_presets_validate(cli, preset):
    code, out, err = cli("config", "lm", "--preset", preset)
    assert code == 0, err
    assert "reproduce_original_padding" in out


def _flat(data: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in data.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def test_authors_presets_differ_only_in_the_padding():
    lab = get_lab("lm")
    padded, masked = (_flat(resolve(lab.Config, lab.preset_overrides(p)).model_dump(mode="json")) for p in AUTHORS)
    assert {k for k in padded.keys() | masked.keys() if padded.get(k) != masked.get(k)} == {"train.reproduce_original_padding"}
    assert padded["train.reproduce_original_padding"] is True and masked["train.reproduce_original_padding"] is False


def test_script_overrides_validate():
    """The --set overrides the script passes for a short run (EPOCHS=2 LIMIT=5) are valid."""
    lab = get_lab("lm")
    sets = ["device=cpu", "dtype=float32", "train.epochs=2", "train.snapshot_epochs=[]", "task.limit=5",
            "train.eval_batch_size=16"]
    for preset in AUTHORS:
        config = resolve(lab.Config, lab.preset_overrides(preset), None, sets)
        assert config.train.epochs == 2 and config.train.snapshot_epochs == [] and config.task.limit == 5
    for preset in REDUCED:  # the script keeps the log-spaced evaluations within EPOCHS
        config = resolve(lab.Config, lab.preset_overrides(preset), None, [*sets, "train.eval_epochs=[0,1,2]"])
        assert config.train.eval_epochs == [0, 1, 2] and config.task.sample == 14


def test_reduced_authors_presets_are_the_authors_regime_on_a_subset():
    """The reduced regime differs from the authors' only in the subset, the CPU, the log-spaced
    evaluations and the checkpoint interval; its two arms only in the padding."""
    lab = get_lab("lm")
    full, reduced, masked = (_flat(resolve(lab.Config, lab.preset_overrides(p)).model_dump(mode="json"))
                             for p in (AUTHORS[0], *REDUCED))
    assert {k for k in full.keys() | reduced.keys() if full.get(k) != reduced.get(k)} == \
        {"device", "task.sample", "train.eval_epochs", "train.checkpoint_every"}
    assert {k for k in reduced.keys() | masked.keys() if reduced.get(k) != masked.get(k)} == {"train.reproduce_original_padding"}
    assert reduced["train.lr"] == 5e-6 and reduced["train.epochs"] == 300 and reduced["train.record"] == "train-before-step"
