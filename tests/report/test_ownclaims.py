"""A researcher's own claims (report/ownclaims.py, `stagewise claims LAB --runs ... --declare FILE`):
judged by the verdict engine over the runs' seeds; a minimum seed count below what the engine
needs and a threshold outside the metric's range are refused in one line, exit 2, nothing judged."""

from __future__ import annotations

import json

import pytest

from stagewise import RunSpec
from stagewise.errors import UserError
from stagewise.labs import get_lab
from stagewise.report.claims import Summary
from stagewise.report.ownclaims import judge, metric_range, read_declarations
from stagewise.report.verdicts import ENGINE


def _file(tmp_path, body: str):
    path = tmp_path / "claims.yaml"
    path.write_text(body)
    return path


ONE = """claims:
- id: mine
  statement: the final loss is small
  metric: {metric}
  relation: "{relation}"
  threshold: {threshold}
  aggregation: {aggregation}
  min_seeds: {min_seeds}
"""


def _declare(tmp_path, metric="train.loss", relation="<=", threshold=0.5, aggregation="median", min_seeds=6):
    return _file(tmp_path, ONE.format(metric=metric, relation=relation, threshold=threshold, aggregation=aggregation,
                                      min_seeds=min_seeds))


@pytest.mark.parametrize("min_seeds", [0, 1, 5])
def test_a_median_claim_below_the_engine_minimum_is_refused(tmp_path, min_seeds):
    with pytest.raises(UserError, match=f"min_seeds={min_seeds}: a median over seeds needs min_seeds >= 6"):
        read_declarations(_declare(tmp_path, min_seeds=min_seeds))


@pytest.mark.parametrize("metric,threshold", [("train.loss", -0.1), ("test.acc.q_part", 1.5), ("W_ov.cos_target", -2),
                                              ("type_share", 2.0)])
def test_a_threshold_outside_the_metric_range_is_refused(tmp_path, metric, threshold):
    assert metric_range(metric) is not None
    with pytest.raises(UserError, match=f"threshold={threshold:g} is outside the range of {metric}"):
        read_declarations(_declare(tmp_path, metric=metric, threshold=threshold))


def test_a_declared_range_is_checked_and_unknown_metrics_pass(tmp_path):
    assert metric_range("W_kq.fro") is None
    assert read_declarations(_declare(tmp_path, metric="W_kq.fro", threshold=-3))[0].metric == "W_kq.fro"
    body = ONE.format(metric="W_kq.fro", relation=">=", threshold=-3, aggregation="every", min_seeds=1) + "  range: [0, 10]\n"
    with pytest.raises(UserError, match=r"outside the range of W_kq.fro \(its declared range: \[0, 10\]\)"):
        read_declarations(_file(tmp_path, body))
    with pytest.raises(UserError, match="claim 0: frobnicate: Extra inputs"):
        read_declarations(_file(tmp_path, ONE.format(metric="x", relation="<=", threshold=1, aggregation="every", min_seeds=1)
                                + "  frobnicate: 1\n"))


def test_own_claims_are_decided_by_the_engine_over_the_seeds(tmp_path):
    summaries = [Summary(lab="ntp", seeds=[s], per_seed={str(s): {"W_kq.fro": 1 + 0.1 * s}}) for s in range(8)]
    (base,) = read_declarations(_declare(tmp_path, metric="W_kq.fro"))
    declared = [base.model_copy(update={"threshold": t, "id": f"c{i}"}) for i, t in enumerate((1.75, 0.5, 1.35))]
    judged = judge(declared, summaries)
    # the median interval of 8 seeds at >= 95 % is [min, max] = [1.0, 1.7] (99.2 %): below 1.75 holds, above 0.5
    # fails, 1.35 inside: inconclusive
    assert [c.verdict for c in judged] == ["holds", "fails", "inconclusive"]
    assert all(c.judged_by == ENGINE and c.interval == pytest.approx([1.0, 1.7]) for c in judged)
    assert judge(declared[:1], summaries[:5])[0].verdict == "inconclusive"  # 5 of 6 seeds
    with pytest.raises(UserError, match="seed 0 is in two of the runs"):
        judge(declared[:1], summaries + summaries[:1])


def test_the_cli_refuses_in_one_line_and_judges_the_runs(tmp_path, cli, run_cache):
    run = run_cache.path(RunSpec(lab="ntp", overrides=dict(get_lab("ntp").smoke), name="smoke"))
    code, out, err = cli("claims", "ntp", "--runs", str(run), "--declare", str(_declare(tmp_path, min_seeds=1)))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "min_seeds=1" in err and not out
    code, out, err = cli("claims", "ntp", "--runs", str(run), "--declare", str(_declare(tmp_path, threshold=-1)))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "outside the range" in err
    code, out, err = cli("claims", "ntp", "--runs", str(run), "--declare", str(_declare(tmp_path, aggregation="every",
                                                                                            min_seeds=1)), "--json")
    assert code == 0, err
    (claim,) = json.loads(out)
    assert claim["id"] == "mine" and claim["judged_by"] == ENGINE and claim["verdict"] in ("holds", "fails")
