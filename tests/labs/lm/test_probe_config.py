"""The lm lab's own probe sets and order claims (issue 39): the config's checks are one line
each, ``order_claims`` on hand-built metric frames agrees with a plain reach rule (lead in
steps, a lower bound when ``then`` is never reached, sustain over a blip), and the order claims
of 6+ seeds are judged over seeds by the verdict engine."""

from __future__ import annotations

import pandas as pd
import pytest

from stagewise.config import validate
from stagewise.errors import UserError
from stagewise.labs.lm import claimspecs as cs
from stagewise.labs.lm.claims import across_runs, order_claims
from stagewise.labs.lm.config import Config
from stagewise.report.claims import Summary
from stagewise.report.verdicts import ENGINE

TRACKED = {"task": {"name": "none"}, "source": {"kind": "tracked"}, "baselines": {"kinds": []}}
SETS = [{"name": "facts", "kind": "questions", "path": "facts.jsonl"}, {"name": "held", "kind": "text", "path": "held.txt"}]


def config(**over) -> Config:
    return validate(Config, {**TRACKED, "probes": SETS, **over})


def one_line(data: dict) -> str:
    with pytest.raises(UserError) as err:
        validate(Config, data)
    assert len(err.value.lines) == 1 and "\n" not in err.value.lines[0], err.value.lines
    return err.value.lines[0]


# ------------------------------------------------------------------------------ config checks
def test_a_valid_probe_config_and_its_conditions():
    c = config(order=[{"id": "syntax_first", "first": " probe.blimp.accuracy >= 0.6 ", "then": "probe.facts.loss<=2.5e0",
                       "sustain": 3}])
    assert [p.name for p in c.probes] == ["facts", "held"] and c.probes[1].window == 128
    claim = c.order[0]
    assert claim.first == "probe.blimp.accuracy >= 0.6"  # stripped
    assert claim.condition("first") == ("probe.blimp.accuracy", ">=", 0.6)
    assert claim.condition("then") == ("probe.facts.loss", "<=", 2.5)


def test_bad_probe_configs_are_one_line_each():
    probes = {"probes": SETS}
    assert "measured on a model trained elsewhere" in one_line({**probes, "baselines": {"kinds": []}})  # source.kind=train
    assert "the lab's own training needs a task" in one_line({"task": {"name": "none"}})
    assert "give the probe sets to measure" in one_line(TRACKED)
    assert "'facts' repeats" in one_line({**TRACKED, "probes": [*SETS, SETS[0]]})
    order = {"first": "probe.facts.accuracy >= 0.5", "then": "probe.held.loss <= 3"}
    assert "'a' repeats" in one_line({**TRACKED, **probes, "order": [{"id": "a", **order}, {"id": "a", **order}]})
    for bad in ("probe.x > 3", "probe.x >= abc", "probe.x", ">= 3", "probe x >= 3"):
        assert "write METRIC >= X or METRIC <= X" in one_line({**TRACKED, **probes, "order": [{"id": "a", **order, "first": bad}]})
    assert "'1e' is not a number" in one_line({**TRACKED, **probes, "order": [{"id": "a", **order, "then": "probe.x >= 1e"}]})
    assert "must be finite" in one_line({**TRACKED, **probes, "order": [{"id": "a", **order, "then": "probe.x <= 1e999"}]})
    assert "sustain" in one_line({**TRACKED, **probes, "order": [{"id": "a", **order, "sustain": 0}]})
    assert "order.0.id" in one_line({**TRACKED, **probes, "order": [{"id": "a.b", **order}]})
    text = {"name": "held", "kind": "text", "path": "held.txt"}
    assert "categories: only for kind=questions" in one_line({**TRACKED, "probes": [{**text, "categories": ["x"]}]})
    assert "paradigms: only for kind=pairs" in one_line({**TRACKED, "probes": [{**text, "paradigms": ["x"]}]})
    questions = {"name": "facts", "kind": "questions", "path": "facts.jsonl"}
    assert "only for kind=text" in one_line({**TRACKED, "probes": [{**questions, "window": 64}]})
    assert "path: give the questions file" in one_line({**TRACKED, "probes": [{"name": "facts", "kind": "questions"}]})
    assert "'a b' is not a name" in one_line({**TRACKED, "probes": [{**questions, "categories": ["a b"]}]})
    assert "probes.0.name" in one_line({**TRACKED, "probes": [{**questions, "name": "my facts"}]})
    assert "probes.0.kind" in one_line({**TRACKED, "probes": [{**questions, "kind": "essay"}]})
    assert config(probes=[{"name": "blimp", "kind": "pairs"}]).probes[0].path is None  # pairs: data.root's blimp/


# ------------------------------------------------------------------------------ order claims on one run
def reach(steps: list[float], values: list[float], relation: str, threshold: float, sustain: int) -> float | None:
    """The first step from which the condition holds at ``sustain`` records in a row (a plain loop)."""
    ok = [v >= threshold if relation == ">=" else v <= threshold for v in values]
    return next((steps[i] for i in range(len(ok) - sustain + 1) if all(ok[i:i + sustain])), None)


STEPS = [0, 10, 20, 40, 80, 160, 320]  # not evenly spaced: leads are in steps, not records


def frame_of(curves: dict[str, list[float]], seed: int = 0) -> pd.DataFrame:
    return pd.DataFrame([(s, seed, m, v) for m, vs in curves.items() for s, v in zip(STEPS, vs)],
                        columns=["step", "seed", "metric", "value"])


def order_config(**claims: tuple[str, str, int]) -> Config:
    return config(order=[{"id": i, "first": f, "then": t, "sustain": k} for i, (f, t, k) in claims.items()])


CURVES = {"probe.blimp.accuracy": [0.50, 0.55, 0.70, 0.72, 0.80, 0.85, 0.90],   # >= 0.7 from step 20
          "probe.facts.accuracy": [0.00, 0.00, 0.05, 0.10, 0.30, 0.35, 0.40],   # >= 0.3 from step 80
          "probe.held.loss": [9.0, 8.0, 7.0, 6.5, 6.0, 5.5, 5.2],              # <= 6 from step 80, never <= 5
          "probe.blip.accuracy": [0.0, 0.9, 0.0, 0.0, 0.8, 0.9, 0.9]}          # one record at step 10, then from 80


def test_order_claims_agree_with_the_plain_reach_rule():
    claims = {"before": ("probe.blimp.accuracy >= 0.7", "probe.facts.accuracy >= 0.3", 2),
              "loss": ("probe.blimp.accuracy >= 0.7", "probe.held.loss <= 6", 2),
              "never_then": ("probe.facts.accuracy >= 0.3", "probe.held.loss <= 5", 2),
              "never_first": ("probe.held.loss <= 5", "probe.blimp.accuracy >= 0.7", 2),
              "reversed": ("probe.facts.accuracy >= 0.3", "probe.blimp.accuracy >= 0.7", 2),
              "neither": ("probe.facts.accuracy >= 0.99", "probe.held.loss <= 1", 2),
              "unrecorded": ("probe.blimp.accuracy >= 0.7", "probe.zorro.accuracy >= 0.5", 2)}
    c = order_config(**claims)
    got, facts = order_claims(c, frame_of(CURVES))
    by_id = {claim.id: claim for claim in got}
    assert list(by_id) == [f"probe_order_{i}" for i in claims] and all(x.spec_id == cs.PROBE_ORDER.id for x in got)
    assert all(x.judged_by == ENGINE for x in got)

    def steps(i: str) -> tuple[float | None, float | None]:
        (m1, r1, t1), (m2, r2, t2) = (c.order[list(claims).index(i)].condition(w) for w in ("first", "then"))
        return reach(STEPS, CURVES[m1], r1, t1, 2), reach(STEPS, CURVES[m2], r2, t2, 2)

    for i in ("before", "loss"):  # both reached, first earlier: the lead, in steps
        first, then = steps(i)
        assert first is not None and then is not None and then > first
        assert by_id[f"probe_order_{i}"].verdict == "holds" and by_id[f"probe_order_{i}"].value == then - first
        assert facts[i] == {"first_step": first, "then_step": then, "last_step": STEPS[-1]}
    first, then = steps("never_then")  # then never reached: at least one past the last record
    assert first is not None and then is None
    assert by_id["probe_order_never_then"].verdict == "holds"
    assert by_id["probe_order_never_then"].value == STEPS[-1] + 1 - first
    first, then = steps("never_first")
    assert first is None and then is not None and by_id["probe_order_never_first"].verdict == "fails"
    first, then = steps("reversed")
    assert by_id["probe_order_reversed"].verdict == "fails" and by_id["probe_order_reversed"].value == then - first < 0
    assert by_id["probe_order_neither"].verdict == "not testable" and "neither threshold" in by_id["probe_order_neither"].reason
    unrecorded = by_id["probe_order_unrecorded"]
    assert unrecorded.verdict == "not testable" and "probe.zorro.accuracy" in unrecorded.reason
    assert "unrecorded" not in facts and "neither" in facts


def test_sustain_ignores_a_one_record_blip():
    frame = frame_of(CURVES)
    leads = {}
    for sustain in (1, 2):
        then = reach(STEPS, CURVES["probe.facts.accuracy"], ">=", 0.3, sustain)
        c = order_config(blip=("probe.blip.accuracy >= 0.5", "probe.facts.accuracy >= 0.3", sustain))
        (claim,), facts = order_claims(c, frame)
        first = reach(STEPS, CURVES["probe.blip.accuracy"], ">=", 0.5, sustain)
        assert facts["blip"]["first_step"] == first and claim.value == then - first
        leads[sustain] = claim
    assert leads[1].verdict == "holds" and leads[1].value == then - 10  # the blip at step 10 counts once
    assert leads[2].verdict == "fails" and leads[2].value == 0  # sustained: step 80, the same record as then's


# ------------------------------------------------------------------------------ over seeds
ORDER = {"ahead": ("probe.blimp.accuracy >= 0.7", "probe.facts.accuracy >= 0.3", 2),
         "behind": ("probe.facts.accuracy >= 0.3", "probe.blimp.accuracy >= 0.7", 2)}


def seed_runs(seeds: range) -> list[tuple[Config, Summary]]:
    """One run per seed: blimp reaches its bar at record (seed % 2) + 1, facts 3 records later (the last
    seed's facts never do); the summary's claims are order_claims' own."""
    runs = []
    for seed in seeds:
        at = seed % 2 + 1
        blimp = [0.8 if i >= at else 0.1 for i in range(len(STEPS))]
        facts = [0.5 if i >= at + 3 and seed != seeds[-1] else 0.0 for i in range(len(STEPS))]
        c = order_config(**ORDER).model_copy(update={"seed": seed})
        claims, _ = order_claims(c, frame_of({"probe.blimp.accuracy": blimp, "probe.facts.accuracy": facts}, seed))
        runs.append((c, Summary(lab="lm", seeds=[seed], claims=claims)))
    return runs


def test_order_claims_over_seeds_are_judged_by_the_engine():
    runs = seed_runs(range(7))
    over = {c.id: c for c in across_runs(runs)}
    ahead, behind = over["probe_order_ahead_over_seeds"], over["probe_order_behind_over_seeds"]
    assert ahead.spec_id == behind.spec_id == cs.PROBE_ORDER.id and ahead.judged_by == behind.judged_by == ENGINE
    leads = {f"{c.seed}/{c.task.sample_seed}": next(x.value for x in s.claims if x.id == "probe_order_ahead") for c, s in runs}
    assert ahead.per_seed == leads and len(leads) == 7 and all(v is not None and v > 0 for v in leads.values())
    assert ahead.verdict == "holds"
    assert behind.verdict == "fails" and all(v is None or v < 0 for v in behind.per_seed.values())
    few = {c.id: c for c in across_runs(seed_runs(range(5)))}
    assert few["probe_order_ahead_over_seeds"].verdict == "inconclusive" and "of 6 seeds" in few["probe_order_ahead_over_seeds"].reason


def test_a_seed_that_cannot_test_the_order_is_not_a_finished_seed():
    runs = seed_runs(range(6))
    c, _ = runs[0]
    (untestable,), _ = order_claims(order_config(ahead=ORDER["ahead"]).model_copy(update={"seed": c.seed}),
                                    frame_of({"probe.blimp.accuracy": [0.0] * 7, "probe.facts.accuracy": [0.0] * 7}))
    assert untestable.verdict == "not testable"
    runs[0] = (c, Summary(lab="lm", seeds=[c.seed], claims=[untestable]))
    over = {x.id: x for x in across_runs(runs)}["probe_order_ahead_over_seeds"]
    assert len(over.per_seed) == 5 and over.verdict == "inconclusive"
