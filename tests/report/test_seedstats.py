"""Seed aggregation: the bootstrap interval and the sign test against closed forms."""

import math

import numpy as np
import pytest

from stagewise.report.seedstats import bootstrap_interval, paired_differences, sign_test


def test_bootstrap_of_equal_values_is_a_point():
    iv = bootstrap_interval([0.3, 0.3, 0.3])
    assert iv.mean == pytest.approx(0.3) and iv.low == pytest.approx(0.3) and iv.high == pytest.approx(0.3)


def test_bootstrap_interval_lies_within_the_values_and_contains_the_mean():
    values = [-1.0, 0.5, 2.0, 4.0]
    iv = bootstrap_interval(values)
    assert min(values) <= iv.low <= iv.mean <= iv.high <= max(values)
    assert iv == bootstrap_interval(values)  # seeded: the same numbers every time


def test_bootstrap_lower_end_of_three_values_matches_its_closed_form():
    """For n = 3 the resampled means are (a+b+c)/3 over multisets; with 10,000 draws the 2.5 %
    quantile lies at the mean of (min, min, min) or (min, min, mid) (P = 1/27 + 3/27 = 0.148 > 0.025)."""
    lo, mid, hi = 1.0, 2.0, 7.0
    iv = bootstrap_interval([hi, lo, mid])
    assert iv.low in (pytest.approx(lo), pytest.approx((2 * lo + mid) / 3))


def test_sign_test_closed_form():
    assert sign_test([1, 2, 3]) == (3, 3, 0.125)
    k, n, p = sign_test([1, 2, 3, 4, -1, 0])  # the tie at 0 is dropped
    assert (k, n) == (4, 5) and p == pytest.approx((math.comb(5, 4) + 1) / 32)
    assert sign_test([]) == (0, 0, 1.0)


def test_paired_differences_keep_the_common_finite_seeds():
    out = paired_differences({0: 3.0, 1: 1.0, 2: None, 3: 2.0}, {0: 1.0, 1: float("nan"), 2: 0.0, 4: 9.0})
    assert out == {0: 2.0}


def test_bootstrap_refuses_non_finite():
    with pytest.raises(ValueError, match="finite"):
        bootstrap_interval([1.0, np.nan])


def test_over_seeds_section_in_claims_md_and_the_reproduce_page(tmp_path):
    """A reproduce report with ``over_seeds`` shows them in claims.md and report.html, with the
    verdict, the interval and the controls; the per-run counts are unchanged by them."""
    from stagewise.report.claims import ClaimSpec, own
    from stagewise.report.html import reproduce_markdown
    from stagewise.report.pages import reproduce_html_page
    from stagewise.report.seedstats import judge_over_seeds

    spec = ClaimSpec(id="lead", statement="the lead is positive", source=own("test"), quantity="lead", relation=">",
                     threshold=0.0, control="shuffled", over="run", aggregation="paired-median")
    few = judge_over_seeds(spec, {0: 1.0, 1: 2.0, 2: 3.0}, {"shuffled": {0: -1.0, 1: 0.5, 2: -0.5}})
    assert few.verdict == "inconclusive" and "3 of 6 seeds" in few.reason  # the declared minimum (default 6)
    over = judge_over_seeds(spec, {s: 1.0 + s for s in range(6)}, {"shuffled": {s: 0.5 * s - 1 for s in range(6)}})
    assert over.verdict == "holds" and over.id == "lead_over_seeds" and over.judged_by == "stagewise.verdicts/1"
    assert over.interval is not None and over.coverage >= 0.95 and over.sign_p == pytest.approx(2 ** -6)
    report = {"lab": "x", "quick": False, "sources": {},
              "runs": [{"name": "r0", "status": "done", "seeds": [0], "claims": [spec.result(1.0).model_dump(mode="json")],
                        "figures": [], "run_dir": "runs/r0"}],
              "over_seeds": [over.model_dump(mode="json")]}
    md = reproduce_markdown(report)
    assert "## Claims over seeds" in md and "lead_over_seeds: holds" in md and "control shuffled" in md
    page = reproduce_html_page(report, tmp_path)
    assert "Claims over seeds" in page.html and "lead_over_seeds" in page.html
    assert "1 claims over 1 runs, 1 claim checks" in md  # the over-seeds verdicts are not per-run checks


def test_sign_test_aggregation_counts_the_passing_side_of_the_relation():
    """A "<" claim passes on values below its threshold: 6 of 6 below is p = 1/64 (holds)."""
    from stagewise.report.claims import ClaimSpec, own
    from stagewise.report.seedstats import judge_over_seeds

    spec = ClaimSpec(id="err", statement="the error is small", source=own("test"), quantity="error", relation="<",
                     threshold=0.1, control="c", over="run", aggregation="sign-test")
    low = judge_over_seeds(spec, dict(enumerate([0.01, 0.02, 0.0, 0.05, 0.03, 0.04])), {})
    assert low.verdict == "holds" and low.sign_p == pytest.approx(1 / 64) and low.pass_fraction == 1.0
    assert low.value == 0.05 and low.interval == [0.0, 0.05]  # the interval's end nearest failing decides
    high = judge_over_seeds(spec, dict(enumerate([0.5] * 6)), {})
    assert high.verdict == "fails" and high.pass_fraction == 0.0
