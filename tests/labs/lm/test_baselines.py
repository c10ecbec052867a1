"""The no-attention baselines (baselines.py), the difference claims (typeclaims.py) and the
claims over seeds (summary.py): closed forms, invariances, batched == looped, hand-made tables."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

from stagewise.report.verdicts import ENGINE
from stagewise.labs.lm.baselines import Baseline, Baselines
from stagewise.labs.lm.batching import Encoded
from stagewise.labs.lm.categories import CATEGORIES, answer_space
from stagewise.labs.lm import claimspecs as cs
from stagewise.labs.lm.config import Config
from stagewise.labs.lm.summary import across_runs
from stagewise.labs.lm.typeclaims import difference_claims, phase, question_ignoring_prior
from stagewise.report.claims import Summary


def _encoded(rows: list[list[int]], targets: list[int], pad: int = 0) -> Encoded:
    lengths = torch.tensor([len(r) for r in rows])
    ids = torch.full((len(rows), int(lengths.max())), pad, dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, :len(r)] = torch.tensor(r)
    return Encoded(ids, lengths, torch.tensor(targets), torch.zeros(len(rows), dtype=torch.long), ("counterfact",),
                   tuple(f"e{i}" for i in range(len(rows))), pad)


def test_features_are_the_mean_bag_and_the_last_tokens_in_place():
    model = Baseline(n_rows=10, d=3, last_k=2, generator=torch.Generator().manual_seed(0))
    ids = torch.tensor([[1, 2, 3, 0], [4, 0, 0, 0]])  # right-padded with row 0
    lengths = torch.tensor([3, 1])
    f = model.features(ids, lengths)  # (2, 9)
    E = model.embed.detach()
    torch.testing.assert_close(f[0], torch.cat([E[[1, 2, 3]].mean(0), E[3], E[2]]).detach())
    torch.testing.assert_close(f[1], torch.cat([E[4], E[4], E[10]]).detach())  # row 10: "no token"


def test_padding_does_not_change_the_logits():
    model = Baseline(n_rows=10, d=4, last_k=2, generator=torch.Generator().manual_seed(1))
    short = model(torch.tensor([[5, 6]]), torch.tensor([2]))
    padded = model(torch.tensor([[5, 6, 9, 9, 9]]), torch.tensor([2]))
    torch.testing.assert_close(short, padded)


def _space(n_rows: int, answers: list[str], groups: list[str]):
    rows = [f" w{i}" for i in range(n_rows)]
    return answer_space(answers, groups, rows)


def test_batched_evaluation_equals_one_example_at_a_time_and_steps_are_seeded():
    enc = _encoded([[1, 2, 3], [4, 5], [6], [7, 8, 9, 1]], [1, 2, 3, 4])
    space = _space(12, [" w1", " w2", " w3", " w4"], ["g", "g", "h", "h"])

    def make() -> Baselines:
        return Baselines(["bow", "bow-last"], 2, 8, 12, seed=3, top_k=5,
                         make_optimizer=lambda p: torch.optim.AdamW(p, lr=1e-2), targets=enc.targets, record_train_pass=False)

    a, b = make(), make()
    for _ in range(3):
        a.step(enc, torch.tensor([0, 1]), 1e-2)
        b.step(enc, torch.tensor([0, 1]), 1e-2)
    whole, single = a.evaluate(enc, space, batch=64), b.evaluate(enc, space, batch=1)
    for name in whole:
        torch.testing.assert_close(whole[name].answer_logprob, single[name].answer_logprob)
        assert torch.equal(whole[name].top_rows, single[name].top_rows)


def test_state_restores_exactly():
    enc = _encoded([[1, 2], [3, 4, 5]], [6, 7])
    make = lambda: Baselines(["bow-last"], 2, 4, 8, seed=0, top_k=3,  # noqa: E731
                             make_optimizer=lambda p: torch.optim.AdamW(p, lr=1e-2), targets=enc.targets,
                             record_train_pass=False)
    a = make()
    a.step(enc, torch.tensor([0, 1]), 1e-2)
    state = {k: v.clone() for k, v in a.state().items()}
    b = make()
    b.restore(state)
    a.step(enc, torch.tensor([0, 1]), 1e-2)
    b.step(enc, torch.tensor([0, 1]), 1e-2)
    for (ka, va), (kb, vb) in zip(sorted(a.state().items()), sorted(b.state().items())):
        assert ka == kb and torch.equal(va, vb)
    with pytest.raises(ValueError, match="without baselines"):
        make().restore({})


def _counts(rows: list[tuple[int, int, int]]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=list(CATEGORIES), index=pd.Index(range(len(rows)), name="epoch"))


def test_phase_closed_form():
    # epochs 0..4: semantic 0,0,2,6,10 (half of 10 at epoch 3); share tc/(tc+tw): 0, .6, .75, .5, 0
    counts = _counts([(0, 0, 10), (0, 6, 4), (2, 6, 2), (6, 2, 2), (10, 0, 0)])
    ph = phase(counts, 0.5)
    assert ph.semantic_half_epoch == 3 and ph.majority_epoch == 1 and ph.lead == 2
    assert ph.max_share == pytest.approx(0.75)
    never = phase(_counts([(0, 1, 9), (0, 1, 9), (5, 0, 5)]), 0.5)
    assert never.majority_epoch is None and never.lead == 0 and never.max_share == pytest.approx(0.1)
    assert never.phase_share == 0 and ph.phase_share == ph.max_share  # no phase: share 0, as declared
    no_facts = phase(_counts([(0, 1, 9), (0, 8, 2), (0, 9, 1)]), 0.5)  # never learns facts: the phase lasts to the end
    assert no_facts.semantic_half_epoch is None and no_facts.lead == 1 and no_facts.phase_share == pytest.approx(0.9)


def _rows(counts: pd.DataFrame, **extra) -> pd.DataFrame:
    """Prediction rows whose category counts are ``counts`` (open rule column included)."""
    out = []
    for epoch, row in counts.iterrows():
        for cat, n in row.items():
            out += [{"epoch": float(epoch), "category": cat, "category_open": cat, "task": "counterfact", **extra}] * int(n)
    return pd.DataFrame(out)


def test_difference_claims_against_the_baseline():
    model = _rows(_counts([(0, 0, 10), (0, 6, 4), (2, 6, 2), (6, 2, 2), (10, 0, 0)]))
    base = _rows(_counts([(0, 0, 10), (0, 9, 1), (0, 9, 1), (2, 8, 0), (10, 0, 0)]), baseline="bow-last2")
    claims, facts = difference_claims(model, base, "open", 0.5)
    lead, share = claims
    # the baseline: majority at 1, facts half-way at 4: lead 3 > the model's 2; max share 1.0 (epoch 3) > 0.75
    assert facts["baseline"]["lead"] == 3 and lead.value == -1 and lead.verdict == "fails"
    assert share.value == pytest.approx(0.75 - 1.0) and share.verdict == "fails"
    assert "does not exceed the template-frequency baseline" in lead.evidence
    claims, _ = difference_claims(model, None, "open", 0.5)
    assert all(c.verdict == "not testable" and "baselines.kinds" in c.reason for c in claims)


def test_question_ignoring_prior_on_a_hand_made_epoch():
    rows = pd.DataFrame({"epoch": 1.0, "task": "counterfact",
                         "asked_type": ["country"] * 4 + ["language"] * 4,
                         "top1_kind": ["country", "country", "city", None, "country", "country", "language", None],
                         "category_open": ["type-correct", "semantic-correct", "type-wrong", "type-wrong",
                                           "type-wrong", "type-wrong", "type-correct", "type-wrong"]})
    prior = question_ignoring_prior(rows, 1.0)
    assert prior["kinds"]["country"] == {"questions": 4, "share_when_asked": 0.5, "share_when_not_asked": 0.5}
    assert prior["kinds"]["language"]["share_when_asked"] == 0.25
    assert prior["question_blind_share"] == pytest.approx((4 * 0.5 + 4 * 0.0) / 8)
    assert prior["type_wrong_other_granularity"] == 1  # the city answer to a country question


def _summary(lead: float | None, lead_diff: float) -> Summary:
    claims = [cs.TYPE_BEFORE_FACT.result(float("nan") if lead is None else lead),
              cs.TYPE_LEAD_BEYOND_BASELINE.result(lead_diff), cs.TYPE_SHARE_BEYOND_BASELINE.result(lead_diff / 10)]
    return Summary(lab="lm", seeds=[0], claims=claims)


def _family(table):
    runs = []
    for seed, (real, shuffled, diff) in table.items():
        base = {"seed": seed, "task": {"sample_seed": seed}}
        runs.append((Config.model_validate(base), _summary(real, diff)))
        runs.append((Config.model_validate({**base, "task": {"sample_seed": seed, "shuffle_groups": True}}),
                     _summary(shuffled, 0.0)))
    return runs


def test_claims_over_seeds_pair_real_and_control_by_seed():
    """Seeds pair real and control runs; the paired differences decide (verdict engine, 6 seeds at least); a
    control seed that could not measure the claim (NaN: not testable) is not a finished seed of the pair."""
    table = {10: (3.0, None, -1.0), 11: (2.0, 1.0, -2.0), 12: (4.0, -1.0, -1.0), 13: (3.0, 0.0, -1.0),
             14: (5.0, -1.0, -2.0), 15: (2.0, 0.0, -1.0), 16: (3.0, 1.0, -1.0)}
    runs = _family(table)
    runs.append((Config.model_validate({"seed": 10, "train": {"lr": 0.1}}), _summary(5.0, 1.0)))  # another family alone
    over = {c.spec_id: c for c in across_runs(runs)}
    assert {"type_before_fact", "type_lead_beyond_baseline", "type_share_beyond_baseline"} <= set(over)
    raw = over["type_before_fact"]
    assert raw.id == "type_before_fact_over_seeds" and raw.verdict == "holds" and raw.judged_by == ENGINE
    assert raw.per_seed == {f"{s}/{s}": v[0] for s, v in table.items()}
    assert "real - shuffled groups per seed: holds" in raw.evidence and "6 seeds" in raw.evidence  # seed 10 unpaired
    assert raw.interval == [1.0, 6.0] and raw.sign_p == pytest.approx(2 ** -6)  # differences 1, 5, 3, 6, 2, 2
    lead = over["type_lead_beyond_baseline"]
    assert lead.verdict == "fails" and lead.value is not None and lead.value < 0
    assert math.isclose(np.mean(list(lead.per_seed.values())), -9 / 7)
    few = {c.spec_id: c for c in across_runs(_family({s: table[s] for s in (11, 12, 13)}))}
    assert few["type_before_fact"].verdict == "inconclusive" and "3 of 6 seeds" in few["type_before_fact"].reason
