"""The no-attention baselines (baselines.py), the phases (phases.py), the difference claims and the
claims over seeds (claims.py): closed forms, invariances, batched == looped, hand-made tables."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

from stagewise.report.verdicts import ENGINE
from stagewise.labs.lm.baselines import Baseline, Baselines, baseline_rate
from stagewise.labs.lm.batching import Encoded
from stagewise.labs.lm.categories import CATEGORIES, answer_space
from stagewise.labs.lm import claimspecs as cs
from stagewise.labs.lm.config import Config
from stagewise.labs.lm.claims import across_runs, difference_claims
from stagewise.labs.lm.phases import clock, phase, question_ignoring_prior
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


SPARSE_TOL = 1e-6
"""The embedding-bag features (issue 41) against the dense form they replaced: the same sums in another order (float32)."""


def dense_features(model: Baseline, ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """The baselines' features as they were computed before issue 41: a (B, L, d) gather masked by
    the real tokens and summed, then one gather per last token."""
    real = torch.arange(ids.shape[1])[None, :] < lengths[:, None]  # (B, L)
    e = model.embed[ids.clamp(max=model.n_rows)] * real[..., None]  # (B, L, d)
    parts = [e.sum(1) / lengths[:, None].to(e.dtype)]
    for j in range(model.last_k):
        col = lengths - 1 - j
        tok = torch.where(col >= 0, ids.gather(1, col.clamp(min=0)[:, None])[:, 0], torch.full_like(col, model.n_rows))
        parts.append(model.embed[tok])
    return torch.cat(parts, dim=1)


@pytest.mark.parametrize("last_k", [0, 2, 5])
def test_the_embedding_bag_features_and_gradients_equal_the_dense_form(last_k):
    """Values and gradients (embedding table, output matrix) of the sparse features equal the
    dense form's to float tolerance, on prompts shorter and longer than k, with padding that
    holds real token ids (the model's pad row) and ids past the table."""
    gen = torch.Generator().manual_seed(last_k)
    model = Baseline(n_rows=50, d=8, last_k=last_k, generator=gen)
    lengths = torch.tensor([1, 3, 7, 12, 2])
    ids = torch.randint(0, 50, (5, 12), generator=gen)
    ids[0, 1:] = 60  # past the table: clamped, then masked
    target = torch.randint(0, 50, (5,), generator=gen)
    grads = []
    for features in (model.features, lambda i, n: dense_features(model, i, n)):
        model.zero_grad(set_to_none=True)
        f = features(ids, lengths)
        torch.nn.functional.cross_entropy(f @ model.out.T + model.bias, target).backward()
        grads.append((f.detach(), model.embed.grad.clone(), model.out.grad.clone()))
    for sparse, dense in zip(*grads):
        torch.testing.assert_close(sparse, dense, rtol=SPARSE_TOL, atol=SPARSE_TOL)


def test_the_fused_optimizer_follows_the_per_tensor_one():
    """The baselines' fused AdamW (issue 41) gives the per-tensor AdamW's trajectory over 20
    steps to float tolerance, and its state restores exactly as before."""
    enc = _encoded([[1, 2, 3], [4, 5], [6], [7, 8, 9, 1]], [1, 2, 3, 4])

    def make(fused: bool) -> Baselines:
        return Baselines(["bow", "bow-last"], 2, 8, 12, seed=3, top_k=5,
                         make_optimizer=lambda p: torch.optim.AdamW(p, lr=1e-2, fused=fused or None),
                         targets=enc.targets, record_train_pass=False)

    fused, plain = make(True), make(False)
    for step in range(20):
        rows = torch.tensor([step % 4, (step + 1) % 4])
        fused.step(enc, rows, 1e-2)
        plain.step(enc, rows, 1e-2)
    for (kf, vf), (kp, vp) in zip(sorted(fused.state().items()), sorted(plain.state().items())):
        assert kf == kp
        torch.testing.assert_close(vf.double(), vp.double(), rtol=1e-5, atol=1e-6)


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


FLAT = [(10, 0, 0)] * 6  # the facts settled: the last 20 % of the epochs add nothing
MODEL = [(0, 0, 10), (0, 6, 4), (1, 6, 3), (3, 5, 2), (6, 2, 2)] + FLAT
BASE = [(0, 0, 10), (0, 9, 1), (2, 8, 0), (5, 5, 0)] + FLAT + [(10, 0, 0)]


def test_clock_closed_form():
    """Shares at fact progress 0.1 / 0.25 / 0.5, linear in progress from the record before the crossing; the
    majority lead in fact progress."""
    ck = clock(_counts(MODEL), 0.5)
    assert ck.reason is None and ck.records_before == 4 and ck.settling["settled"]
    at_25 = 2 / 3 + 0.75 * (5 / 7 - 2 / 3)  # progress 0.1 -> 0.3 between records 2 and 3
    at_50 = 5 / 7 + (2 / 3) * (0.5 - 5 / 7)  # progress 0.3 -> 0.6 between records 3 and 4
    assert ck.shares_at == pytest.approx({"0.1": 2 / 3, "0.25": at_25, "0.5": at_50})
    assert ck.progress_share == pytest.approx((2 / 3 + at_25 + at_50) / 3)
    assert ck.majority_progress == 0 and ck.progress_lead == 0.5  # the majority comes before any fact
    # the clock is the facts' own: the same table with every epoch stretched (a slower learner) reads the same
    slow = _counts(MODEL)
    slow.index = pd.Index(slow.index.to_numpy() * 7.0, name="epoch")
    stretched = clock(slow, 0.5)
    assert (stretched.shares_at, stretched.progress_share, stretched.progress_lead) == (ck.shares_at, ck.progress_share,
                                                                                        ck.progress_lead)


def test_clock_not_readable_while_the_facts_rise_or_with_too_few_records():
    rising = _counts([(0, 0, 10)] + [(i, 5, 5) for i in range(1, 11)])  # +20 % of the final count in the last fifth
    ck = clock(rising, 0.5)
    assert ck.progress_share is None and "still rising" in ck.reason and "+20%" in ck.reason
    sparse = _counts([(0, 5, 5), (5, 3, 2)] + FLAT)  # one record before the facts reach half
    assert "only 1 record(s)" in clock(sparse, 0.5).reason and "train.eval_every" in clock(sparse, 0.5).reason
    assert "no semantic-correct" in clock(_counts([(0, 5, 5)] * 4), 0.5).reason


def test_difference_claims_against_the_strongest_rate_on_the_facts_clock():
    model = _rows(_counts(MODEL))
    rising = [(0, 0, 10)] + [(i, 5, 5) for i in range(1, 11)]
    weak = [(0, 0, 10), (0, 3, 7), (2, 4, 4), (5, 2, 3)] + FLAT + [(10, 0, 0)]
    base = pd.concat([_rows(_counts(BASE), baseline="bow-last2@lr0.01"), _rows(_counts(weak), baseline="bow-last2@lr0.003"),
                      _rows(_counts(rising), baseline="bow-last2@lr0.001")])
    (lead, share), facts = difference_claims(model, base, "open", 0.5)
    strong = clock(_counts(BASE), 0.5)
    assert strong.progress_share == pytest.approx((0.95 + 1 + 1) / 3)  # 0.9 -> 1.0 halfway at 0.1; 1.0 after
    ours = clock(_counts(MODEL), 0.5).progress_share
    assert share.value == pytest.approx(ours - strong.progress_share) and share.verdict == "fails"
    assert facts["progress_share_difference"]["against"] == "bow-last2@lr0.01"
    assert set(facts["progress_share_difference"]["per_rate"]) == {"bow-last2@lr0.01", "bow-last2@lr0.003"}
    assert lead.value == 0 and lead.verdict == "fails"  # both majorities come before any fact
    assert "bow-last2@lr0.001 left out" in share.evidence and "still rising" in share.evidence
    assert facts["model"]["lead"] == phase(_counts(MODEL), 0.5).lead  # the epoch-based phase stays beside
    (lead, share), _ = difference_claims(model, _rows(_counts(weak), baseline="bow-last2"), "open", 0.5)
    assert share.verdict == "holds" and share.value > 0  # against a weaker baseline alone it would hold
    only_rising = _rows(_counts(rising), baseline="bow-last2")
    claims, _ = difference_claims(model, only_rising, "open", 0.5)
    assert all(c.verdict == "not testable" and "no baseline rate has a facts' clock" in c.reason for c in claims)
    claims, _ = difference_claims(_rows(_counts(rising)), base, "open", 0.5)
    assert all(c.verdict == "not testable" and "the transformer's facts' clock" in c.reason for c in claims)
    claims, _ = difference_claims(model, None, "open", 0.5)
    assert all(c.verdict == "not testable" and "baselines.kinds" in c.reason for c in claims)


def test_type_before_fact_is_not_testable_while_the_facts_rise():
    from stagewise.labs.lm.claims import type_before_fact
    holds, evidence, _ = type_before_fact(_counts([(0, 0, 10)] + [(i, 5, 5) for i in range(1, 11)]), 0.5)
    assert holds is None and "still rising" in evidence
    assert type_before_fact(_counts(MODEL), 0.5)[0] is True


def test_a_grid_member_is_the_one_rate_baseline_at_that_rate():
    """Every kind starts from the same weights at every rate; the member at rate r, stepped with the schedule's factor
    f, equals the run's single baseline stepped at r x f."""
    enc = _encoded([[1, 2, 3], [4, 5], [6], [7, 8, 9, 1]], [1, 2, 3, 4])
    opt = lambda p: torch.optim.AdamW(p, lr=1.0)  # noqa: E731
    grid = Baselines(["bow", "bow-last"], 2, 8, 12, seed=3, top_k=5, make_optimizer=opt, targets=enc.targets,
                     record_train_pass=False, rates=[1e-3, 1e-2])
    one = Baselines(["bow", "bow-last"], 2, 8, 12, seed=3, top_k=5, make_optimizer=opt, targets=enc.targets,
                    record_train_pass=False)
    assert grid.names == ["bow@lr0.001", "bow@lr0.01", "bow-last2@lr0.001", "bow-last2@lr0.01"]
    for name in ("bow", "bow-last2"):  # the same start as the one-rate run: the grid changes only the rate
        for rate in ("0.001", "0.01"):
            torch.testing.assert_close(grid.models[f"{name}@lr{rate}"].embed, one.models[name].embed)
    for factor in (1.0, 0.5):
        grid.step(enc, torch.tensor([0, 2]), lr=123.0, factor=factor)  # lr is ignored by a grid
        one.step(enc, torch.tensor([0, 2]), lr=1e-2 * factor)
    for name in ("bow", "bow-last2"):
        torch.testing.assert_close(grid.models[f"{name}@lr0.01"].out, one.models[name].out)
        assert not torch.allclose(grid.models[f"{name}@lr0.001"].out, one.models[name].out)
    assert baseline_rate("bow-last2@lr0.03") == 0.03 and baseline_rate("bow-last2") is None


def test_a_rate_and_a_grid_together_are_refused():
    with pytest.raises(ValueError, match="baselines.lr_grid"):
        Config.model_validate({"baselines": {"kinds": ["bow-last"], "lr": 1e-3, "lr_grid": [1e-3, 1e-2]}})
    with pytest.raises(ValueError, match="finite and > 0"):
        Config.model_validate({"baselines": {"kinds": ["bow-last"], "lr_grid": [0.0]}})
    with pytest.raises(ValueError, match="counterfact's prompt variants"):
        Config.model_validate({"task": {"name": "blimp", "prompts": "paraphrase"}})


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


def _arm_summary(share: float | None, half_epoch: float = 4.0) -> Summary:
    details = {"baseline_comparison": {"model_clock": {"progress_share": share}, "model": {"semantic_half_epoch": half_epoch},
                                       "baselines": {"bow-last2@lr0.01": {"clock": {"progress_share": 0.5}}}}}
    return Summary(lab="lm", seeds=[0], claims=[cs.TYPE_BEFORE_FACT.result(1.0)], details=details)


def test_mechanism_claims_pair_each_arm_with_the_real_run_of_its_seed():
    """Per seed the arm's share at matched fact progress minus the real run's; the median over seeds decides (engine,
    6 seeds at least); a seed without a clock in either run is not a finished seed; the arms stay out of the type
    claims over seeds."""
    real = {s: 0.6 + 0.01 * s for s in range(7)}
    harder = {s: real[s] - 0.1 - 0.01 * s for s in range(7)}
    harder[6] = None  # no clock in the arm: not a finished seed
    easier = {s: real[s] + (0.05 if s % 2 else -0.05) for s in range(7)}
    runs = []
    for seed in range(7):
        base = {"seed": seed, "task": {"sample_seed": seed}}
        runs.append((Config.model_validate(base), _arm_summary(real[seed])))
        runs.append((Config.model_validate({**base, "task": {"sample_seed": seed, "prompts": "paraphrase"}}),
                     _arm_summary(harder[seed])))
        runs.append((Config.model_validate({**base, "task": {"sample_seed": seed, "subject_repeat": 3}}),
                     _arm_summary(easier[seed], half_epoch=2.0)))
    over = {c.spec_id: c for c in across_runs(runs)}
    cue = over["type_phase_shrinks_with_harder_cue"]
    assert cue.verdict == "holds" and cue.judged_by == ENGINE and len(cue.per_seed) == 6
    assert cue.per_seed["2/2"] == pytest.approx(harder[2] - real[2]) and "bow-last share 0.5 vs 0.5" in cue.evidence
    facts = over["type_phase_shrinks_with_easier_facts"]
    assert facts.verdict in ("inconclusive", "fails") and "epoch 2 vs 4" in facts.evidence
    assert over["type_before_fact"].per_seed == {f"{s}/{s}": 1.0 for s in range(7)}  # the real runs only
    assert "type_phase_shrinks_with_moved_cue" not in over  # no run of that arm


def test_arm_names():
    from stagewise.labs.lm.claims import arm_name

    def arm(**task):
        return arm_name(Config.model_validate({"task": task}))

    assert arm() is None and arm(prompts="paraphrase") == "harder type cue" and arm(subject_repeat=3) == "easier facts"
    assert arm(prompt_suffix="; answer:") == "moved type cue"
    assert arm(prompts="rewrite") == arm(prompts="paraphrase", subject_repeat=2) == "other arm"  # no declared prediction
