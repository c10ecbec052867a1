"""The NTP lab's figures and the summary lines beside them on awkward runs: a token named like
TeX math still draws every figure, and a metric no seed has a value for (cos(W_kq, W_kq*) with
no max-margin W_kq*) is summarised and drawn without numpy RuntimeWarnings."""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pandas as pd
import pytest

from stagewise.labs import RunSpec


@pytest.mark.slow
def test_dollar_token_draws_figures(cli, tmp_path):
    tok = "$\\foo$"
    data = {"tokens": [tok, "b", "c"], "samples": [{"input": [tok], "next": "b"}, {"input": ["b"], "next": "c"},
                                                 {"input": ["c"], "next": tok}, {"input": [tok, "c"], "next": "b"}]}
    path = tmp_path / "dollar.json"
    path.write_text(json.dumps(data))
    out = tmp_path / "r"
    code, _, stderr = cli("run", "ntp", "--set", f"data.file={path}", "--set", "train.steps_stage1=5",
                          "--set", "train.steps_stage2=5", "--out", str(out), "-q")
    assert code == 0, stderr
    assert (out / "tables" / "generalization.parquet").exists() and (out / "figures" / "figure2.png").exists()


def test_fmt_and_row_spread_of_values_no_seed_has():
    from stagewise.labs.ntp.claims import NO_VALUE, _stats_text
    from stagewise.report.plots import row_spread

    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        assert _stats_text([math.nan, math.nan]) == NO_VALUE  # e.g. compare's joint/loss_linear slope
        assert _stats_text(np.array([1.0, math.nan, 3.0])) == "min 1, mean 2, max 3 (1 of 3 seeds nan)"
        assert _stats_text([]) == NO_VALUE
        values = np.array([[1.0, 3.0], [math.nan, math.nan], [math.nan, 5.0]])  # (T, S)
        low, mean, high = row_spread(values)
    np.testing.assert_array_equal(low, [1.0, math.nan, 5.0])
    np.testing.assert_array_equal(mean, [2.0, math.nan, 5.0])
    np.testing.assert_array_equal(high, [3.0, math.nan, 5.0])


def test_ntp_preset_with_undefined_cos_wkq_runs_without_runtime_warnings(tmp_path):
    """q3-conflicting-orders has no max-margin W_kq*: cos(W_kq, W_kq*) is NaN at every step of
    stage 2.
    Its summary (2 seeds), Figure 2, the rate-fit and attention figures used to warn 'All-NaN
    slice' / 'Mean of empty slice' (reproduce ntp's output); a warning is an error here, so
    the run would be recorded failed."""
    from stagewise.orchestrate.runner import execute_spec

    spec = RunSpec(lab="ntp", preset="q3-conflicting-orders",
                   overrides={"n_seeds": 2, "train": {"steps_stage1": 10, "steps_stage2": 20}})
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        manifest = execute_spec(spec, tmp_path / "run", raise_on_failure=True)
    assert manifest["status"] == "done"
    frame = pd.read_parquet(tmp_path / "run" / "metrics.parquet")
    cos = frame[(frame["metric"] == "W_kq.cos_target") & (frame["step"] > 10)]["value"]
    assert len(cos) and cos.isna().all()  # the case this test is about: no value in stage 2
    assert {p.stem for p in (tmp_path / "run" / "figures").glob("*.png")} >= {"figure2", "rate_fits", "attention"}
