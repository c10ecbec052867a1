"""Long-horizon claims of the NTP lab (issue 8): late rates against -eta/||W_kq*||,
Theorem 2's rate, Theorem 1's norm band, QP target against Proposition 2's closed form."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from stagewise.config import deep_merge, resolve
from stagewise.labs import get_lab
from stagewise.labs.ntp.claims import RATE_RTOL
from stagewise.labs.ntp.horizon import LATE_MIN_MARGIN, late_fits
from stagewise.orchestrate import execute, prepare

LAB = replace(get_lab("ntp"), make_figures=lambda *a, **k: [])
HORIZON = ("late_rate_margin", "late_rate_theorem2", "norm_band_theorem1", "closer_to_qp_than_prop2")

# the paper's Proposition-2 counterexample (tests/labs/ntp/test_maxmargin.py): QP and closed form differ
COUNTEREXAMPLE = {"tokens": ["a", "b", "c", "d", "q"],
                  "samples": [{"input": ["a", "q"], "next": "b"}, {"input": ["b", "c", "d", "q"], "next": "c"}],
                  "collocation": {"a": "b", "b": "c", "c": "d", "d": "q", "q": "a"}}


def run(tmp_path, name, preset=None, **over):
    base = LAB.preset_overrides(preset) if preset else {}
    config = resolve(LAB.Config, deep_merge(deep_merge(base, {"train": {"threads": 1}}), over))
    paths = prepare(LAB, config, tmp_path / name)
    execute(LAB, config, paths, progress=False)
    summary = json.loads(paths.summary.read_text())
    return config, pd.read_parquet(paths.metrics), summary, {c["id"]: c for c in summary["claims"]}


@pytest.fixture(scope="module")
def example1(tmp_path_factory):
    return run(tmp_path_factory.mktemp("h"), "e1", "example1")


def test_example1_late_rates_match_the_margin_growth(example1):
    _, frame, summary, claims = example1
    for cid in ("late_rate_margin", "late_rate_theorem2", "norm_band_theorem1"):
        assert claims[cid]["holds"] is True, claims[cid]
    fits = summary["details"]["late_rates"]
    eta, star = summary["details"]["lr_stage2"], summary["details"]["wkq_star_norm_sq"] ** 0.5
    assert fits["predicted_rate"][0] == pytest.approx(-eta / star, rel=1e-12)  # -0.025 / sqrt(13/6)
    assert fits["train.loss.gap.rate"][0] == pytest.approx(-eta / star, rel=RATE_RTOL)
    assert fits["margin_at_start"][0] >= LATE_MIN_MARGIN
    # Proposition 2 is exact on Example 1: the comparison is not applicable
    assert claims["closer_to_qp_than_prop2"]["holds"] is None and "coincide" in claims["closer_to_qp_than_prop2"]["reason"]


def test_late_fit_recovers_an_exact_exponential(example1):
    """Golden: a loss gap e^{-r t} exactly gives the fitted rate -r over the late window."""
    config, frame, summary, _ = example1
    T = config.train.steps_stage1
    synthetic = frame.copy()
    rows = synthetic["metric"].isin(["train.loss.gap", "train.opt_attn.min"])
    t = synthetic.loc[rows, "step"].to_numpy() - T
    gap = 3.0 * np.exp(-0.0123 * t)
    synthetic.loc[rows, "value"] = np.where(synthetic.loc[rows, "metric"] == "train.loss.gap", gap, 1 - gap)
    fits = late_fits(config, synthetic, [0], summary["details"]["lr_stage2"], np.array([1.0]))
    assert fits["train.loss.gap.rate"][0] == pytest.approx(-0.0123, rel=1e-9)
    assert fits["train.opt_attn.min.gap.rate"][0] == pytest.approx(-0.0123, rel=1e-6)


def test_claims_fail_on_tampered_metrics(example1):
    """Falsifiable: a slower late decay, or a norm above t*eta, makes the claims fail."""
    from stagewise.labs import RunResult
    from stagewise.labs.ntp.claims import training_claims
    from stagewise.labs.ntp.summary import rate_fits

    config, frame, summary, _ = example1
    T = config.train.steps_stage1
    d = summary["details"]
    extras = {"seeds": [0], "eta0": d["lr_stage1"], "eta": d["lr_stage2"], "vocab_size": 4, "max_len": [3], "qp_prop2_cos": [1.0],
              "targets": [{k: d[k] for k in ("wov_star_norm", "wkq_star_norm_sq", "prop2_wkq_norm_sq", "prop2_gap")}],
              "named_cases": [], "orthonormal": True}
    slow = frame.copy()
    rows = (slow["metric"] == "train.loss.gap") & (slow["step"] > T)
    slow.loc[rows, "value"] *= np.exp(0.2 * 0.01698 * (slow.loc[rows, "step"] - T))  # rate 20% slower
    big = frame.copy()
    big.loc[(big["metric"] == "W_kq.fro") & (big["step"] == T + 5), "value"] *= 1.5
    empty = pd.DataFrame(columns=["seed", "category", "covered", "correct"])
    for tampered, cid in ((slow, "late_rate_margin"), (big, "norm_band_theorem1")):
        rates = rate_fits(config, tampered, [0], d["lr_stage1"], d["lr_stage2"])
        out = {c.id: c for c in training_claims(config, tampered, RunResult(extras).extras, rates, empty)}
        assert out[cid].holds is False, out[cid]


def test_short_horizon_makes_rate_claims_null(tmp_path):
    _, _, _, claims = run(tmp_path, "short", "example1", train={"steps_stage2": 300})
    for cid in ("late_rate_margin", "late_rate_theorem2"):
        assert claims[cid]["holds"] is None and "horizon too short" in claims[cid]["reason"]
    assert claims["norm_band_theorem1"]["holds"] is True  # the band needs no late window


def test_adam_breaks_the_rate_and_the_band(tmp_path):
    """The rate -eta/||W*|| and the band are normalized GD's: Adam fails both on Example 1."""
    _, _, _, claims = run(tmp_path, "adam", "example1", train={"optimizer": "adam"})
    assert claims["late_rate_margin"]["holds"] is False
    assert claims["norm_band_theorem1"]["holds"] is False


def test_iterates_end_closer_to_the_qp_than_to_prop2(tmp_path):
    path = tmp_path / "cx.json"
    path.write_text(json.dumps(COUNTEREXAMPLE))
    _, frame, _, claims = run(tmp_path, "cx", data={"file": str(path)}, train={"steps_stage1": 200, "steps_stage2": 900})
    c = claims["closer_to_qp_than_prop2"]
    assert c["holds"] is True and "1/1 seeds differ" in c["evidence"]
    end = frame[frame["step"] == frame["step"].max()].set_index("metric")["value"]
    assert 1 - end["W_kq.cos_target"] < 1 - end["W_kq.cos_prop2"] and end["W_kq.dist_target"] < end["W_kq.dist_prop2"]


def test_evidence_of_values_no_seed_has_is_nan_without_a_warning():
    """Seen pasting the Sweeps-from-Python block: 'RuntimeWarning: All-NaN slice encountered' per run."""
    import warnings

    from stagewise.labs.ntp.claims import _range_text

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _range_text([float("nan"), float("nan")]) == "nan"
        assert _range_text([1.0, float("nan"), 3.0]) == "1..3"
        assert _range_text([2.5]) == "2.5"
