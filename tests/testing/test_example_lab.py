"""The example lab outside the package (examples/linear_modes, imported from its path): it
passes the conformance suite, its trajectories are the closed form of Saxe et al. (2014),
its claims hold on the default preset and fail on the controls, and an ensemble equals a
loop of single-seed runs."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from stagewise import RunSpec, execute_spec
from stagewise.labs import REGISTRY
from stagewise.report import plots
from stagewise.runs import MemoryContext
from stagewise.testing import check_lab
from stagewise.testing.checks import kill_after

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "linear_modes"


def _import_example():
    """The example package, imported from its folder as ``linear_modes`` (no sys.path change)."""
    if "linear_modes" not in sys.modules:
        spec = importlib.util.spec_from_file_location("linear_modes", EXAMPLE / "__init__.py",
                                                      submodule_search_locations=[str(EXAMPLE)])
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["linear_modes"] = module
        spec.loader.exec_module(module)
    return sys.modules["linear_modes"]


LAB = _import_example().LAB
from linear_modes.config import Config  # noqa: E402  (importable once the package is)
from linear_modes.theory import accumulated_lr, closed_form  # noqa: E402
from linear_modes.train import run  # noqa: E402

CLOSED_FORM_TOL = 0.015
"""max_t |a_i(t) - a_i*(t)| / s_i at lr = 0.004 (measured 0.009: gradient descent is the flow to O(lr s))."""
MAP_RTOL = 1e-12
"""The decoupled modes follow gradient descent's scalar map a <- a (1 + lr (s - a))^2 to round-off (measured 7e-16)."""


def _trajectories(config: Config, member: int = 0) -> np.ndarray:
    """(T + 1, r) mode strengths of one member of an in-memory run (every step logged)."""
    ctx = MemoryContext(config.seed_list())
    run(config, ctx)
    return np.stack([ctx.series(f"W2W1.mode_strength.{i}", member).numpy() for i in range(len(config.data.singular_values))], 1)


def test_the_example_lab_passes_the_conformance_suite(tmp_path):
    report = check_lab(LAB, workdir=tmp_path)
    assert report.ok and not report.skipped, str(report)
    assert "linear_modes" not in REGISTRY


def test_a_run_killed_inside_a_control_group_resumes_to_the_same_numbers(tmp_path):
    """The smoke run's second group (equal-sv) killed after its step-24 record resumes from its
    own checkpoint (step 18, group 1) to the uninterrupted run's metrics and claims."""
    spec = RunSpec(lab=LAB.name, overrides=dict(LAB.smoke), name="smoke")
    assert LAB.smoke["train"]["checkpoint_every"] == 9 and LAB.smoke["controls"] == ["equal-sv"]
    first_group = LAB.smoke["train"]["steps"] + 1  # records of group 0: steps 0 .. steps
    with REGISTRY.registered(LAB):
        execute_spec(spec, tmp_path / "whole", raise_on_failure=True)
        with kill_after(first_group + 25) as kill, pytest.raises(KeyboardInterrupt):
            execute_spec(spec, tmp_path / "killed")
        assert kill["fired"] and (tmp_path / "killed" / "checkpoints" / "ckpt_0001_0000000018.safetensors").is_file()
        assert execute_spec(spec, tmp_path / "killed")["status"] == "done"
    frames = [pd.read_parquet(tmp_path / name / "metrics.parquet") for name in ("killed", "whole")]
    pd.testing.assert_frame_equal(*frames, check_exact=True)
    claims = [json.loads((tmp_path / name / "summary.json").read_text())["claims"] for name in ("killed", "whole")]
    assert claims[0] == claims[1]


def test_mode_trajectories_follow_the_closed_form_at_small_lr():
    """Decoupled init: each mode follows gradient descent's scalar map exactly and the
    closed-form sigmoid to O(lr): within CLOSED_FORM_TOL at lr 0.004, about half the error of lr 0.008."""
    errors = []
    for lr, steps in ((0.008, 1000), (0.004, 2000)):
        config = Config.model_validate({"n_seeds": 1, "controls": [], "train": {"lr": lr, "steps": steps}})
        a, s = _trajectories(config), np.asarray(config.data.singular_values)  # (T + 1, r), (r,)
        np.testing.assert_allclose(a[1:], a[:-1] * (1 + lr * (s - a[:-1])) ** 2, rtol=MAP_RTOL, atol=0)
        assert a[0] == pytest.approx(np.full(3, config.model.init_scale), rel=1e-12)
        theory = closed_form(s, config.model.init_scale, accumulated_lr(config, steps))  # (T + 1, r)
        errors.append(float((np.abs(a - theory) / s).max()))
    assert errors[1] <= CLOSED_FORM_TOL, errors
    assert 0.4 <= errors[1] / errors[0] <= 0.6, errors  # first order in lr


def _claims(folder: Path, preset: str | None) -> dict[str, dict]:
    execute_spec(RunSpec(lab=LAB.name, preset=preset, name=str(preset)), folder, raise_on_failure=True)
    return {c["id"]: c for c in json.loads((folder / "summary.json").read_text())["claims"]}


def test_the_claims_hold_on_the_default_preset_and_fail_on_its_controls(tmp_path):
    with REGISTRY.registered(LAB), plots.recording() as figures:
        default = _claims(tmp_path / "default", None)
        equal_sv = _claims(tmp_path / "equal-sv", "equal-sv")
        large_init = _claims(tmp_path / "large-init", "large-init")
    assert {k: c["verdict"] for k, c in default.items()} == dict.fromkeys(
        ["modes_in_order", "onset_matches_theory", "control_fails_equal_sv", "control_fails_large_init"], "holds")
    assert default["modes_in_order"]["value"] == pytest.approx(1.413, abs=1e-3)  # theory: 1.425 (flow), 1.413 (steps)
    assert default["onset_matches_theory"]["value"] == pytest.approx(0.0221, abs=1e-4)
    assert equal_sv["modes_in_order"]["verdict"] == "fails" and equal_sv["modes_in_order"]["value"] == pytest.approx(1.0)
    assert large_init["onset_matches_theory"]["verdict"] == "fails" and large_init["onset_matches_theory"]["pass_fraction"] == 0
    assert [plots.check_figure(fig) for fig in figures] == [()] * 3


@pytest.mark.parametrize("init", ["decoupled", "random"])
def test_an_ensemble_equals_a_loop_of_single_seed_runs(init):
    config = Config.model_validate({"seed": 3, "n_seeds": 3, "controls": [], "model": {"init": init},
                                    "train": {"steps": 60, "lr": 0.05}})
    together = MemoryContext(config.seed_list())
    run(config, together)
    for member, seed in enumerate(config.seed_list()):
        alone = MemoryContext([seed])
        run(config.model_copy(update={"seed": seed, "n_seeds": 1}), alone)
        for step, values in alone.records.items():
            for name, value in values.items():
                torch.testing.assert_close(together.records[step][name][member], value[0], rtol=1e-13, atol=1e-15)


def test_the_cli_finds_an_outside_lab_through_stagewise_labs(tmp_path):
    """STAGEWISE_LABS=NAME=MODULE registers the example for the CLI; a malformed pair is one line, exit 2."""
    import os
    import subprocess

    env = {**os.environ, "PYTHONPATH": str(EXAMPLE.parent), "STAGEWISE_LABS": "linear_modes=linear_modes.lab", "COLUMNS": "250"}
    listed = subprocess.run([sys.executable, "-m", "stagewise.cli", "claims", "linear_modes"], env=env,
                            capture_output=True, text=True)
    assert listed.returncode == 0 and "modes_in_order" in listed.stdout
    bad = subprocess.run([sys.executable, "-m", "stagewise.cli", "labs"], env={**env, "STAGEWISE_LABS": "linear_modes"},
                         capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0 and "NAME=MODULE" in bad.stderr


TRACKED_RTOL = 1e-12
"""A researcher's autograd gradient descent vs the lab's closed-form update: the same products in
another order (measured max relative difference 1e-15 over 80 steps)."""


def test_the_example_lab_is_tracked_by_the_same_tracker(tmp_path):
    """Issue 39: a lab that declares a probe is tracked by the generic Tracker. A researcher's own
    ``nn.Sequential`` of two bias-free linear layers, trained by autograd gradient descent on the
    population loss, probed every step: its records equal the lab's own run of the same config
    (init, target, rate), its summary judges the lab's claims, and a model the probe cannot
    take is one line with nothing made."""
    from stagewise import Tracker, UserError, load_run
    from linear_modes.data import build_target
    from linear_modes.model import init_weights

    settings = {"seed": 5, "controls": [], "n_seeds": 1, "train": {"steps": 80, "lr": 0.05, "log_every": 1}}
    config = Config.model_validate(settings)
    own = MemoryContext([5])
    run(config, own)  # the lab's own training: the reference records

    target = build_target(config, [5])
    W1, W2 = init_weights(config, [5], target)
    net = torch.nn.Sequential(torch.nn.Linear(config.data.d_in, config.model.hidden, bias=False),
                              torch.nn.Linear(config.model.hidden, config.data.d_out, bias=False)).double()
    with torch.no_grad():
        net[0].weight.copy_(W1[0])
        net[1].weight.copy_(W2[0])
    optimizer = torch.optim.SGD(net.parameters(), lr=config.train.lr)
    eye = torch.eye(config.data.d_in, dtype=torch.float64)  # whitened inputs: the network's map is net(I)^T
    with REGISTRY.registered(LAB):
        with pytest.raises(UserError, match="not a two-layer linear network"):
            Tracker(tmp_path / "bad", torch.nn.Linear(2, 2), lab=LAB, overrides=settings)
        assert not (tmp_path / "bad").exists()
        with Tracker(tmp_path / "tracked", net, lab=LAB, overrides=settings, every=1) as tracker:
            tracker.step(0, force=True)
            for step in range(1, config.train.steps + 1):
                optimizer.zero_grad()
                P = net(eye).T  # (d_out, d_in) = W2 W1
                (0.5 * (target.M[0] - P).square().sum()).backward()
                optimizer.step()
                tracker.step(step)
        loaded = load_run(tmp_path / "tracked")
    records = loaded.metrics
    assert sorted(records["step"].unique()) == list(range(config.train.steps + 1))
    for step, values in own.records.items():
        for name, value in values.items():
            got = records[(records["step"] == step) & (records["metric"] == name)]["value"].to_numpy()
            np.testing.assert_allclose(got, value.numpy(), rtol=TRACKED_RTOL)
    verdicts = {c.id: str(c.verdict) for c in loaded.summary.claims}
    assert verdicts["modes_in_order"] == "holds" and verdicts["onset_matches_theory"] == "holds"
