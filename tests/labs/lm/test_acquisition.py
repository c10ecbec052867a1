"""The acquisition study (issue 44) on synthetic runs whose answers are known: logistic curves in
log2(step + 1) with set midpoints and binomial noise from a seeded generator, records at step 0
and 2^0 ... 2^13."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from stagewise.labs.lm import acquisition as acq
from stagewise.labs.lm import claimspecs as cs
from stagewise.labs.lm.acquisition_figures import acquisition_heatmap, category_curves

STEPS = np.array([0.0] + [2.0 ** k for k in range(14)])  # (15,) log-spaced records
X = np.log2(STEPS + 1)  # (15,) the log scale
PAIRS = 2000  # minimal pairs per paradigm (binomial noise sd <= 0.011)
POSITIONS = 20000  # content-word positions of the word shares
SLOPE = 3.0  # per log2 unit


def logistic(mid: float, low: float, high: float, slope: float = SLOPE) -> np.ndarray:
    return low + (high - low) / (1 + np.exp(-slope * (X - mid)))  # (15,)


def run_frame(rng: np.random.Generator, paradigms: dict[str, np.ndarray], class_mid: float = 4.0,
              exact_mid: float = 8.0, loss_falls: bool = True) -> pd.DataFrame:
    """One run's long-form frame: each paradigm's true accuracy curve (15,) drawn over PAIRS pairs."""
    rows = []
    for name, truth in paradigms.items():
        rows += [(s, acq.paradigm_metric(name), v) for s, v in zip(STEPS, rng.binomial(PAIRS, truth) / PAIRS)]
    for metric, truth in ((acq.CONTENT_CLASS, logistic(class_mid, 0.05, 0.5)),
                          (acq.CONTENT_EXACT, logistic(exact_mid, 0.01, 0.2))):
        rows += [(s, metric, v) for s, v in zip(STEPS, rng.binomial(POSITIONS, truth) / POSITIONS)]
    loss = np.linspace(10.0, 3.0, STEPS.size) if loss_falls else np.linspace(3.0, 4.0, STEPS.size)
    rows += [(s, acq.LOSS, v) for s, v in zip(STEPS, loss)]
    return pd.DataFrame(rows, columns=["step", "metric", "value"])


def names(n: int) -> list[str]:
    return [f"p{i:02d}" for i in range(n)]


def coverage_of(paradigms: list[str], covered: int = 500) -> pd.DataFrame:
    return pd.DataFrame({"paradigm": paradigms, "field": [("agreement", "binding", "filler-gap")[i % 3]
                                                          for i in range(len(paradigms))],
                         "pairs": 600, "covered_pairs": covered, "covered_share": covered / 600, "known_share": 0.9})


def study(seeds: int, mids: dict[str, float] | None = None, noise: float = 0.0, seed: int = 0,
          class_mid: float = 4.0, exact_mid: float = 8.0) -> dict[int, pd.DataFrame]:
    """Runs whose paradigm P is acquired at log-step mids[P] + N(0, noise) (chance 0.5 -> 0.9)."""
    rng = np.random.default_rng(seed)
    mids = mids if mids is not None else dict(zip(names(12), np.linspace(2.0, 10.0, 12)))
    return {s: run_frame(rng, {p: logistic(m + noise * rng.standard_normal(), 0.5, 0.9) for p, m in mids.items()},
                         class_mid, exact_mid) for s in range(seeds)}


def ngram_of(paradigms: list[str], accuracy: float | dict[str, float]) -> pd.DataFrame:
    acc = accuracy if isinstance(accuracy, dict) else dict.fromkeys(paradigms, accuracy)
    return pd.DataFrame([(order, p, acc[p] - 0.01 * (4 - order)) for p in paradigms for order in (1, 2, 3, 4)],
                        columns=["order", "paradigm", "accuracy"])


def by_id(verdicts: acq.StudyVerdicts) -> dict[str, object]:
    return {c.id: c for c in verdicts.claims}


# ------------------------------------------------------------------ the per-run table


def test_acquisition_steps_recovered_within_one_record():
    mids = dict(zip(names(10), np.linspace(2.3, 10.7, 10)))
    frame = study(1, mids, seed=3)[0]
    table = acq.acquisition_table(frame, coverage=coverage_of(list(mids)))
    assert list(table.columns) == list(acq.TABLE_COLUMNS) and table["acquired"].all()
    for row in table.itertuples():
        found = int(np.flatnonzero(STEPS == row.step)[0])
        truth = int(np.flatnonzero(X >= mids[row.paradigm])[0])  # first record past the half-way point
        assert abs(found - truth) <= 1, (row.paradigm, row.step)
        assert row.chance == pytest.approx(0.5, abs=0.05) and row.final == pytest.approx(0.9, abs=0.05)
    assert set(table["field"]) == {"agreement", "binding", "filler-gap"} and not table["heuristic"].any()


def test_a_paradigm_below_chance_while_the_loss_falls_is_a_heuristic_not_acquired():
    rng = np.random.default_rng(1)
    curves = {"falls": logistic(5.0, 0.7, 0.4), "rises": logistic(5.0, 0.5, 0.9), "flat": np.full(15, 0.6)}
    table = acq.acquisition_table(run_frame(rng, curves)).set_index("paradigm")
    assert table.at["falls", "heuristic"] and not table.at["falls", "acquired"] and table.at["falls", "step"] is None
    assert not table.at["rises", "heuristic"] and table.at["rises", "acquired"]
    assert not table.at["flat", "heuristic"] and not table.at["flat", "acquired"]
    rising_loss = acq.acquisition_table(run_frame(rng, curves, loss_falls=False)).set_index("paradigm")
    assert not rising_loss.at["falls", "heuristic"]  # no learning happened: not a learned heuristic


def test_paradigms_below_the_coverage_floor_are_not_testable_with_their_coverage():
    runs = study(2)
    coverage = coverage_of(names(12))
    coverage.loc[0, "covered_pairs"] = cs.MIN_COVERED_PAIRS - 1
    out = acq.judge_study(runs, {}, ngram_of(names(12), 0.6), ngram_of(names(12), 0.6), coverage, permutations=99)
    assert list(out.not_testable["paradigm"]) == ["p00"] and "p00" not in set(out.tables[acq.REAL][0]["paradigm"])
    claim = by_id(out)["beyond_ngram_p00"]
    assert claim.verdict == "not testable" and f"{cs.MIN_COVERED_PAIRS - 1} of 600 pairs" in claim.reason


# ------------------------------------------------------------------ claim 2: the order over seeds


def test_spearman_shortcut_equals_scipy_and_the_tiny_case_has_its_closed_form():
    rng = np.random.default_rng(0)
    steps = rng.integers(0, 6, size=(4, 9)).astype(float)  # (S, K) with ties
    steps[1, :3] = math.inf
    got = acq.order_agreement(steps, permutations=99)
    pairs = [stats.spearmanr(steps[i], steps[j]).statistic for i in range(4) for j in range(i + 1, 4)]
    assert got.rho == pytest.approx(np.mean(pairs), abs=1e-12)
    # 2 seeds, 3 paradigms in the same order: the null's rho is 1 exactly when the two permutations
    # agree, with probability 1/6, so p -> 1/6
    same = acq.order_agreement(np.array([[1.0, 2.0, 3.0], [1.0, 2.0, 3.0]]), permutations=20_000)
    assert same.rho == pytest.approx(1.0) and same.p == pytest.approx(1 / 6, abs=0.01)
    assert acq.order_agreement(np.ones((3, 5)), permutations=99).p == 1.0  # no order to agree on


def test_permutation_p_is_uniform_under_the_null():
    rng = np.random.default_rng(7)
    ps = np.array([acq.order_agreement(rng.permuted(np.tile(np.arange(10.0), (6, 1)), axis=1), permutations=99,
                                       seed=i).p for i in range(200)])
    small = int((ps <= 0.05).sum())
    assert stats.binom.cdf(small, 200, 0.05) > 0.001 and stats.binom.sf(small - 1, 200, 0.05) > 0.001, small


def test_order_claim_holds_for_a_common_order_and_fails_for_random_orders():
    common = study(6, noise=0.3, seed=11)
    rng = np.random.default_rng(12)
    scrambled = {s: run_frame(rng, {p: logistic(float(m), 0.5, 0.9) for p, m in
                                    zip(names(12), rng.permutation(np.linspace(2.0, 10.0, 12)))}) for s in range(6)}
    ngram = ngram_of(names(12), 0.6)
    held = by_id(acq.judge_study(common, scrambled, ngram, ngram, coverage_of(names(12)), permutations=999))
    claim = held["acquisition_order_agrees_over_seeds"]
    assert claim.verdict == "holds" and claim.value <= cs.ORDER_ALPHA and claim.control_verdicts == {acq.SHUFFLED: "fails"}
    assert "mean Spearman rho" in claim.evidence
    failed = by_id(acq.judge_study(scrambled, {}, ngram, ngram, coverage_of(names(12)), permutations=999))
    assert failed["acquisition_order_agrees_over_seeds"].verdict == "fails"
    assert failed["acquisition_order_agrees_over_seeds"].value > 0.05


def test_order_claim_needs_enough_paradigms_acquired_in_every_seed():
    runs = study(6, dict(zip(names(4), (2.0, 4.0, 6.0, 8.0))))
    out = by_id(acq.judge_study(runs, {}, ngram_of(names(4), 0.6), ngram_of(names(4), 0.6), coverage_of(names(4)),
                                permutations=99))["acquisition_order_agrees_over_seeds"]
    assert out.verdict == "not testable" and "4 paradigm(s)" in out.reason


# ------------------------------------------------------------------ claim 1: class before the exact word


def test_class_before_exact_holds_and_the_shuffled_control_fails():
    ngram = ngram_of(names(12), 0.6)
    real = study(6, class_mid=3.5, exact_mid=8.5, seed=21)
    control = study(6, class_mid=6.5, exact_mid=6.5, seed=22)  # both rise together: no lead
    claim = by_id(acq.judge_study(real, control, ngram, ngram, coverage_of(names(12)),
                                  permutations=99))["syntax_before_semantics_pretraining"]
    assert claim.verdict == "holds" and claim.control_verdicts == {acq.SHUFFLED: "fails"}
    assert all(v is not None and v > 2 for v in claim.per_seed.values())
    same = study(6, class_mid=3.5, exact_mid=8.5, seed=23)
    faked = by_id(acq.judge_study(real, same, ngram, ngram, coverage_of(names(12)),
                                  permutations=99))["syntax_before_semantics_pretraining"]
    assert faked.verdict == "fails" and "not specific" in faked.evidence


def test_exact_never_rising_gives_a_lower_bound():
    lead = acq.CategoryLead(class_onset=15.0, exact_onset=None, last_step=8192.0)
    assert lead.value == pytest.approx(math.log2(8194) - 4.0)
    assert acq.CategoryLead(None, None, 8192.0).value is None


# ------------------------------------------------------------------ claim 3: parallel or sequential


def test_parallel_share_near_half_for_parallel_and_near_zero_for_sequential():
    ngram = ngram_of(names(12), 0.6)
    parallel = study(6, dict(zip(names(12), [6.0] * 12)), seed=31)
    sequential = study(6, dict(zip(names(12), np.linspace(1.5, 12.0, 12))), seed=32)
    cover = coverage_of(names(12))
    par = by_id(acq.judge_study(parallel, sequential, ngram, ngram, cover, permutations=99))["parallel_acquisition"]
    seq = by_id(acq.judge_study(sequential, parallel, ngram, ngram, cover, permutations=99))["parallel_acquisition"]
    # identical curves: where the first third has crossed half of its gain, the last third has done about half of
    # its own (HALF, less the noise of which record each crosses at); 1 only for curves that jump in one record
    assert par.verdict == "holds" and min(par.per_seed.values()) > 2 * cs.PARALLEL_SHARE
    assert seq.verdict == "fails" and max(seq.per_seed.values()) < 0.05
    assert "shuffled words (beside" in par.evidence and not par.control_verdicts


# ------------------------------------------------------------------ claim 4: beyond the n-grams


def test_beyond_ngram_against_the_reference_and_its_control():
    runs = study(6, seed=41)
    shuffled = study(6, seed=42)
    accuracy = {p: (0.7 if i % 2 else 0.88) for i, p in enumerate(names(12))}  # final ~0.9: beats 0.7, not 0.88
    finals = {p: 0.9 for p in names(12)}  # the shuffled corpus's n-grams explain its runs
    out = by_id(acq.judge_study(runs, shuffled, ngram_of(names(12), accuracy), ngram_of(names(12), finals),
                                coverage_of(names(12)), permutations=99))
    beats = out["beyond_ngram_p01"]
    assert beats.verdict == "holds" and beats.control_verdicts == {acq.SHUFFLED: "fails"}
    assert "order 4, accuracy 0.7" in beats.evidence and "first reaches it at step" in beats.evidence
    assert out["beyond_ngram_p00"].verdict == "fails" and "order 4" in out["beyond_ngram_p00"].evidence
    alone = by_id(acq.judge_study(runs, runs, ngram_of(names(12), accuracy), ngram_of(names(12), accuracy),
                                  coverage_of(names(12)), permutations=99))["beyond_ngram_p01"]
    assert alone.verdict == "fails" and "not specific" in alone.evidence


def test_fewer_than_six_seeds_are_inconclusive():
    runs = study(4, seed=51)
    ngram = ngram_of(names(12), 0.6)
    out = by_id(acq.judge_study(runs, {}, ngram, ngram, coverage_of(names(12)), permutations=99))
    for cid in ("syntax_before_semantics_pretraining", "acquisition_order_agrees_over_seeds", "parallel_acquisition",
                "beyond_ngram_p03"):
        assert out[cid].verdict == "inconclusive" and "4 of 6 seeds" in out[cid].reason, cid


def test_heuristics_are_counted_per_seed():
    rng = np.random.default_rng(61)
    curves = {"falls": logistic(5.0, 0.7, 0.4), **{p: logistic(3.0 + i, 0.5, 0.9) for i, p in enumerate(names(6))}}
    runs = {s: run_frame(rng, curves if s < 2 else {**curves, "falls": np.full(15, 0.7)}) for s in range(6)}
    every = ["falls", *names(6)]
    out = acq.judge_study(runs, {}, ngram_of(every, 0.6), ngram_of(every, 0.6), coverage_of(every), permutations=99)
    assert out.heuristics[acq.REAL] == {"falls": 2}


# ------------------------------------------------------------------ figures


@pytest.mark.parametrize("rows", [23, 70])
def test_figures_are_written(tmp_path, rows):
    mids = dict(zip(names(rows), np.linspace(1.0, 14.0, rows)))  # the last ones never acquired
    runs = study(6, mids, seed=71)
    cover = coverage_of(names(rows))
    tables = {s: acq.acquisition_table(f, coverage=cover) for s, f in runs.items()}
    path = acquisition_heatmap(runs, tables, cover, tmp_path / "heatmap.png")
    assert path.exists() and path.stat().st_size > 0 and (tmp_path / "heatmap.pdf").exists()
    curves = category_curves(runs, study(6, mids, seed=72, class_mid=6.0, exact_mid=6.0), tmp_path / "curves.png")
    assert curves.exists() and curves.stat().st_size > 0
