"""The gate-noise regime (spec section 5): the Q noise radius option, the chunked sampler, the
sizing formulas behind the `gate-noise` preset, and its up-front memory estimate."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
import torch

from stagewise.config import deep_merge, resolve
from stagewise.errors import UserError
from stagewise.labs import get_lab
from stagewise.labs.disentangled import gate_noise, theory
from stagewise.labs.disentangled.config import Config
from stagewise.labs.disentangled.data import DataSpec, prompt_chunks, sample_prompts
from stagewise.labs.disentangled.resources import estimate
from stagewise.labs.disentangled.train import members_from_config

LAB = get_lab("disentangled")
STD_RTOL = 0.01  # sampled per-coordinate Q noise std vs radius ||zeta|| / sqrt(d), on ~10^6 draws (0.07 % s.e.)
ESTIMATE_RTOL = 0.20  # the bound: estimate within 20 % of the measured peak (VmHWM)


def test_the_radius_sets_the_per_coordinate_q_noise():
    spec = DataSpec(d=64, prompt_len=40, zeta=2.0, q_noise_radius=3.0, p0=0.0, q0=1.0, q_geometry="xor")
    assert spec.q_noise_std == pytest.approx(3.0 * 2.0 / 8.0)
    prompts = sample_prompts(spec, [5], 400, "train")
    y = prompts.y[0]  # (N, L)
    zeta = prompts.zeta[0]  # (2, d), scaled to ||zeta||
    # Q-only tokens (q0 = 1): x2 = side * centre + noise with centre zeta1 (y = +1) or zeta2 (y = -1)
    centre = torch.where((y > 0).unsqueeze(-1), zeta[0], zeta[1])  # (N, L, d)
    x2 = prompts.x2[0]  # (N, L, d)
    side = torch.sign((x2 * centre).sum(-1, keepdim=True))  # (N, L, 1): the cluster side, |<noise, centre>| << ||zeta||^2
    noise = x2 - side * centre
    assert noise.std().item() == pytest.approx(spec.q_noise_std, rel=STD_RTOL)
    assert (noise.norm(dim=-1).mean() / 2.0).item() == pytest.approx(3.0, rel=0.02)  # R = radius ||zeta||


def test_the_radius_must_keep_the_noise_below_zeta_per_coordinate(cli, tmp_path):
    with pytest.raises(UserError, match=r"q_noise_radius=8: must be < sqrt\(d\)"):
        resolve(Config, {"data": {"d": 16, "q_noise_radius": 8.0}})
    code, _, stderr = cli("run", "disentangled", "--set", "data.d=16", "--set", "data.q_noise_radius=4", "--out",
                          str(tmp_path / "r"))
    assert code == 2 and len(stderr.strip().splitlines()) == 1 and not (tmp_path / "r").exists()


@pytest.mark.parametrize("chunk", [16, 100, 4096, 10 ** 9])
def test_chunked_sampling_draws_the_same_values(chunk):
    spec = DataSpec(d=7, prompt_len=9, q_noise_radius=1.5, label_rule="composite", p_flip=0.3)
    whole = sample_prompts(spec, [0, 3], 37, "test")
    parts = sample_prompts(spec, [0, 3], 37, "test", chunk_elements=chunk)
    for key in ("x1", "x2", "y", "kind"):
        assert torch.equal(getattr(whole, key), getattr(parts, key)), key


def test_prompt_chunks_cover_the_draw_in_rng_blocks():
    for n, L, d, chunk in ((37, 9, 7, 100), (400, 1000, 200, 1 << 21), (3, 2, 1, 16), (1, 5, 3, 1)):
        ranges = prompt_chunks(n, L, d, chunk)
        assert ranges[0][0] == 0 and ranges[-1][1] == n
        assert all(a < b and b == c for (a, b), (c, _) in zip(ranges, ranges[1:] + [(n, n)]))
        assert all((b - a) * L * d % 16 == 0 for a, b in ranges[:-1])


@pytest.mark.parametrize("name, d, prompt_len", [("gate-noise", 200, 1000), ("gate-noise-small", 100, 1100)])
def test_the_preset_is_the_sizing_of_the_spec_formulas(name, d, prompt_len):
    sized = gate_noise.size(d=d, prompt_len=prompt_len, zeta=3.0, radius=4.0, rho=26.0)
    preset = LAB.preset_overrides(name)
    for section, values in sized.overrides().items():
        for key, value in values.items():
            assert preset[section][key] == value, (section, key)
    assert sized.stage2_ratio < 1 < sized.stage1_ratio  # stage 1 above sigma_crit, stage 2 below
    assert sized.k2_excess <= 0.05 * math.log(2)  # K2(t1) within 5 % of log 2 by the random-output estimate
    assert sized.k2_floor() <= 0.5 * math.log(2)  # rho = 26: the reduced model's floor allows K2 <= log 2 / 2
    cfg = resolve(Config, preset)
    reason = theory.analytic_reason(cfg, members_from_config(cfg)[0])
    assert reason is not None and "token-level gates" in reason


def test_sizing_refuses_inputs_outside_the_regime():
    with pytest.raises(UserError) as err:
        gate_noise.size(d=200, prompt_len=1000, zeta=3.0, radius=20.0, rho=26.0, lr_stage1=0.1, lr_stage2=0.5)
    text = str(err.value)
    assert "radius=20.0" in text and "lr_stage2=0.5" in text


def test_a_gate_noise_run_that_cannot_fit_is_refused_up_front(cli, tmp_path):
    out = tmp_path / "big"
    code, _, stderr = cli("run", "disentangled", "--preset", "gate-noise", "--set", "data.n_train=40000", "--out", str(out))
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and "memory" in lines[0] and not out.exists(), stderr


PEAK_SCRIPT = """
import json, sys
from stagewise.config import resolve
from stagewise.labs import get_lab
from stagewise.labs.disentangled.experiments import groups
from stagewise.labs.disentangled.train import State, build_ensemble, init_weights, run_training
from stagewise.engine import resolve_dtype
lab = get_lab("disentangled")
config = resolve(lab.Config, json.loads(sys.argv[1]))
group = groups(config)[0]
ens = build_ensemble(config, group.members)
state = run_training(ens, State(list(init_weights(config, group.members, resolve_dtype(config.model.dtype)))), 3,
                     lambda t, s: None)
print(json.dumps({"hwm": int([l for l in open("/proc/self/status") if l.startswith("VmHWM")][0].split()[1]) * 1024}))
"""


@pytest.mark.slow
def test_the_estimate_is_within_20_percent_of_the_measured_peak():
    """A quarter-size gate-noise group (d 100, L 500, N = T = 400, 2 seeds with ablations and
    controls, float32): sampling and three steps in a fresh process, VmHWM vs estimate."""
    over = deep_merge(LAB.preset_overrides("gate-noise"),
                      {"n_seeds": 2, "data": {"d": 100, "prompt_len": 500, "q_noise_radius": 4.0}})
    config = resolve(Config, over)
    out = subprocess.run([sys.executable, "-c", PEAK_SCRIPT, json.dumps(over)], capture_output=True, text=True, check=True)
    peak = json.loads(out.stdout.strip().splitlines()[-1])["hwm"]
    assert abs(estimate(config).memory_bytes - peak) <= ESTIMATE_RTOL * peak, (estimate(config), peak)


def test_a_gate_noise_run_judges_its_story_against_the_floors(run_cache):
    """A small run in the gate-noise regime with the no-noise reference: the summary carries the six
    floor-relative criteria (the engine's), and the absolute loss-level criteria judged against the
    same floors; the values are the stage table's shares of the attainable drops."""
    from stagewise import RunSpec
    from stagewise.labs.disentangled.claimspecs import GATE_NOISE_CRITERIA
    from stagewise.report.claims import read_summary
    from stagewise.report.verdicts import ENGINE

    overrides = {"n_seeds": 2, "data": {"d": 20, "prompt_len": 12, "zeta": 3.0, "q_noise_radius": 4.0, "n_train": 40,
                                        "n_test": 40},
                 "train": {"steps": 40, "t1": 10, "log_every": 10, "spectrum_every": 40, "noise": 0.05, "l2": 0.08},
                 "experiment": {"kind": "ablations", "ablations": ["no-anneal", "no-noise"], "control": True, "floors": False}}
    folder = run_cache.path(RunSpec(lab="disentangled", overrides=overrides, name="gate-noise-story"))
    summary = read_summary(folder / "summary.json")
    claims = {c.id: c for c in summary.claims}
    ids = [spec.id for spec in GATE_NOISE_CRITERIA]
    assert all(i in claims and claims[i].judged_by == ENGINE for i in ids)
    # the absolute criterion is replaced by its floor-aware judgement, not duplicated
    assert sum(c.id == "p_learned_stage1" for c in summary.claims) == 1
    config = resolve(Config, deep_merge(overrides, {}))
    floor, reason = theory.p_floor_t1(config, members_from_config(config)[0])
    assert not reason and 0 < floor < math.log(2)
    # the share is (log 2 - K1(t1)) / (log 2 - K1*_t1), K1(t1) the absolute claim's per-seed value (units of log 2)
    k1 = {s: v * math.log(2) for s, v in claims["p_learned_stage1"].per_seed.items()}
    share = claims["gn_p_learned_t1"].per_seed
    assert set(share) == {"0", "1"}
    assert all(share[s] == pytest.approx((math.log(2) - k1[s]) / (math.log(2) - floor), rel=1e-9) for s in share)
    # 0.5 log 2 is below this size's P floor: the absolute criterion is not testable, never "fails"
    assert floor > 0.5 * math.log(2) and claims["p_learned_stage1"].verdict == "not testable"
    assert "below the attainable floor" in claims["p_learned_stage1"].reason
    # at this tiny size the noise-free reference overfits (test K2 above log 2): the reference-relative criteria say so
    ref_flat = "does not learn Q" in claims["gn_q_learned_end"].reason
    assert ref_flat or claims["gn_q_learned_end"].verdict in ("holds", "fails", "inconclusive")
