"""Out-of-assumption data (data.out_of_assumption, reviewers' questions): each kind breaks
exactly its assumption, the validator warns instead of failing only when it is allowed, the
realizable part stays the same dataset, and the theory's claims become null."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from stagewise.config import resolve
from stagewise.errors import UserError
from stagewise.labs import get_lab
from stagewise.labs.ntp.data import OUT_OF_ASSUMPTION, build_dataset, random_dataset
from stagewise.labs.ntp.maxmargin import kq_constraints, max_margin_targets
from stagewise.labs.ntp.claims import STAGE1_CLAIMS
from stagewise.orchestrate import execute, prepare

LAB = replace(get_lab("ntp"), make_figures=lambda *a, **k: [])


def pairs(ds):
    return [(s.input, s.next) for s in ds.samples]


@pytest.mark.parametrize("kind", OUT_OF_ASSUMPTION)
@pytest.mark.parametrize("seed", [0, 1])
def test_each_kind_breaks_only_its_assumption(kind, seed):
    base = random_dataset(12, seed=seed)
    ds = random_dataset(12, seed=seed, out_of_assumption=(kind,))
    assert ds.violations and {k for k, _ in ds.violations} == {kind}
    names = list(ds.tokens)
    with pytest.raises(UserError):  # the same samples are an error when the breach is not allowed
        build_dataset(names, [(list(i), n) for i, n in pairs(ds)])
    if kind != "non-injective":  # the breach is added on top of the same realizable dataset
        assert set(pairs(base)) <= set(pairs(ds))
    else:
        assert len(set(ds.collocation)) == ds.vocab_size - 1 and len(ds.samples) == len(base.samples)


def test_realizable_optimal_sets_are_the_optimal_token():
    ds = random_dataset(12, seed=3)
    assert not ds.violations
    assert all(ds.optimal_set(i) == {ds.optimal_token[i]} for i in range(len(ds.samples)))


def test_stochastic_next_is_a_target_distribution():
    """Several next tokens per input: empirical weights are the probabilities (c+1 : 1 for a
    sentence drawn c times, 2/3 and 1/3 for c = 1) and the input's optimal set holds both
    collocated tokens."""
    ds = random_dataset(12, seed=0, out_of_assumption=("stochastic-next",))
    by_input: dict = {}
    for s, w in zip(ds.samples, ds.weights):
        by_input.setdefault(s.input, []).append(w)
    split = [ws for ws in by_input.values() if len(ws) == 2]
    ratios = [max(ws) / min(ws) for ws in split]
    assert split and all(r >= 2 and r == pytest.approx(round(r)) for r in ratios) and 2.0 in map(round, ratios)
    i = next(i for i, s in enumerate(ds.samples) if len(by_input[s.input]) == 2)
    assert len(ds.optimal_set(i)) == 2
    cons = set(map(tuple, kq_constraints(ds)))  # both optimal tokens must beat every other token
    top, q = ds.optimal_set(i), ds.samples[i].query
    assert all((a, b, q) in cons for a in top for b in set(ds.samples[i].input) - top)


def test_conflicting_orders_leave_no_target():
    ds = random_dataset(12, seed=0, out_of_assumption=("conflicting-orders",))
    t = max_margin_targets(ds, np.eye(12))
    assert np.isnan(t.wkq_star).all() and np.isnan(t.wkq_star_norm_sq)
    with pytest.raises(RuntimeError, match="infeasible"):  # realizable data would never hide this
        max_margin_targets(replace(ds, violations=()), np.eye(12))


def test_file_data_allows_the_flagged_violation(tmp_path):
    data = {"tokens": ["a", "b", "c"], "samples": [{"input": ["a", "b"], "next": "b"}, {"input": ["a", "b"], "next": "c"}],
            "collocation": {"a": "b", "b": "c", "c": "a"}}
    path = tmp_path / "d.json"
    path.write_text(json.dumps(data))
    base = {"data": {"file": str(path)}}
    with pytest.raises(UserError, match="2 different next"):
        LAB.check(resolve(LAB.Config, base))
    LAB.check(resolve(LAB.Config, {"data": {"file": str(path), "out_of_assumption": ["stochastic-next"]}}))


def test_bad_options_are_one_line_errors(cli, tmp_path):
    code, _, err = cli("run", "ntp", "--preset", "example1", "--set", "data.out_of_assumption=[confused]",
                       "--out", str(tmp_path / "r"))
    assert code == 2 and "out_of_assumption needs data.source=random or file" in err and len(err.strip().splitlines()) == 1
    code, _, err = cli("run", "ntp", "--set", "data.out_of_assumption=[typo]", "--out", str(tmp_path / "s"))
    assert code == 2 and "out_of_assumption" in err


def test_run_warns_notes_and_nulls_the_theory_claims(tmp_path, capsys):
    config = resolve(LAB.Config, {"n_seeds": 2, "data": {"vocab_size": 8, "out_of_assumption": ["sparse-optimal"]},
                                  "train": {"steps_stage1": 30, "steps_stage2": 60, "threads": 1}})
    paths = prepare(LAB, config, tmp_path / "r")
    manifest = execute(LAB, config, paths, progress=False)
    assert "WARNING data.out_of_assumption=sparse-optimal" in capsys.readouterr().err
    assert manifest["notes"]["out_of_assumption"]["sparse-optimal"]["seeds"] == [0, 1]
    claims = json.loads(paths.summary.read_text())["claims"]
    for c in claims:
        if c["id"] in STAGE1_CLAIMS:
            assert c["holds"] is True, c  # stage 1 sees only the collocation samples
        else:
            assert c["verdict"] == "not testable" and "data outside the theory's assumptions" in c["reason"], c
    assert any("measured (would" in c["evidence"] for c in claims)
    frame = pd.read_parquet(paths.metrics)
    assert np.isfinite(frame[frame["metric"] == "W_kq.cos_target"]["value"]).all()  # a target still exists
