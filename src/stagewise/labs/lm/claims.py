"""Every claim of the LM lab judged in one place: measured values (:mod:`.phases`, :mod:`.twotask`,
:mod:`.rankcurve`, the summaries of a sweep's runs) turned into :class:`~stagewise.report.claims.Claim`
verdicts by the declarations of :mod:`.claimspecs` on the verdict engine (:mod:`stagewise.report.verdicts`).
Thresholds are fixed before any run (h = ``thresholds.half`` = 0.5).

* ``type_before_fact`` (answer framing, under ``thresholds.type_rule``): e_sem = the first epoch
  where semantic-correct reaches h of its final count, e_share = the first where type-correct
  makes up at least h of the wrong predictions; value e_sem - e_share (> 0 holds; a phase that
  never happens is None: fails). Not testable: fewer than 2 epochs, no type-wrong example at
  epoch 0, no semantic-correct one at the end, the facts at h at the first record or still
  rising at the last. Parts (a) (type-wrong falls to h of its epoch-0 count first) and (b)
  (type-correct peaks first) are descriptions: they held in every seed of both controls (docs/lm.md).
* ``type_lead_beyond_baseline``, ``type_share_beyond_baseline``: the transformer's phase on its
  facts' clock (:func:`.phases.clock`) minus the strongest ``bow-last`` rate's, > 0 holds.
* ``syntax_before_semantics`` (blimp and sick): on held-out examples BLiMP beats its label prior at
  an earlier record than SICK (issue 27); the earlier half-drop measure (:func:`half_drop_claim`)
  stays a description in ``details.syntax_half_drop``.
* ``spectral_small_directions_early`` (``stagewise lm rank-curve ... --claim``): :func:`spectral_claim`.
* Over seeds (``Lab.across_runs``): every claim with a declared aggregation, per family of runs
  that differ only in seed and control, and the mechanism claims (an arm against its real runs).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ...config import canonical
from ...report import verdicts
from ...report.claims import Claim, Summary
from ...report.seedstats import judge_over_seeds
from . import claimspecs as cs
from .categories import CATEGORIES
from .claimspecs import CLAIM_P, CLAIMS, MIN_RANDOM_DAMAGE, SPECTRAL_SMALL_DIRECTIONS_EARLY as SPECTRAL
from .config import Config
from .phases import Clock, category_counts, clock, epoch_number, facts_settled, first_epoch, half_drop_facts, phase
from .twotask import NAMES, TASKS, task_facts


# --- the type claims of one run ---------------------------------------------------------------------------------------
def type_before_fact(counts: pd.DataFrame, half: float) -> tuple[bool | None, str, dict[str, Any]]:
    """(holds, evidence, numbers) of the claim on one epoch x category count table.

    Parts: (a) type-wrong falls to ``half`` of its epoch-0 count at an epoch before
    semantic-correct reaches ``half`` of its final count; (b) type-correct's first maximum
    comes before semantic-correct's; (c) at some epoch before that semantic half-way epoch,
    type-correct makes up at least ``half`` of the wrong predictions (the "syntactically
    right, factually wrong" phase). (a) and (b) alone also hold when the group labels are
    shuffled (measured: docs/lm.md), so the claim is their conjunction with (c);
    ``literal_holds`` records (a) and (b) alone."""
    epochs = counts.index.to_numpy()
    sem, tc, tw = (counts[c].to_numpy(float) for c in CATEGORIES)
    facts: dict[str, Any] = {"epochs": int(len(epochs)), "type_wrong_0": float(tw[0]) if len(tw) else None,
                             "semantic_final": float(sem[-1]) if len(sem) else None}
    if len(epochs) < 2 or tw[0] == 0 or sem[-1] == 0:
        why = "fewer than 2 epochs" if len(epochs) < 2 else "no type-wrong prediction at epoch 0" if tw[0] == 0 \
            else "no semantic-correct prediction at the end"
        return None, f"not testable: {why}", facts
    e_tw = first_epoch(epochs, tw <= half * tw[0])
    e_sem = first_epoch(epochs, sem >= half * sem[-1])
    if e_sem == epoch_number(epochs[0]):  # the facts are already at half at the first record: no epoch comes before them
        facts.update(semantic_half_epoch=e_sem)
        return None, (f"not testable: semantic-correct is already at {half:g} of its final count ({sem[0]:.0f} of "
                      f"{sem[-1]:.0f}) at the first recorded epoch {e_sem}: no epoch comes before the facts"), facts
    settling = facts_settled(epochs.astype(float), sem)
    if not settling.settled:  # the claim is measured against the final count: a count still rising cannot carry it
        facts.update(settling=settling.text())
        return None, f"not testable: the facts were still rising at the last record ({settling.text()})", facts
    peak_tc, peak_sem = epoch_number(epochs[int(np.argmax(tc))]), epoch_number(epochs[int(np.argmax(sem))])
    wrong = tc + tw
    share = np.divide(tc, wrong, out=np.zeros_like(tc), where=wrong > 0)  # type-correct share of the wrong predictions
    e_share = first_epoch(epochs, (share >= half) & (wrong > 0))
    a = e_tw is not None and e_sem is not None and e_tw < e_sem
    b = peak_tc < peak_sem
    c = e_share is not None and e_sem is not None and e_share < e_sem
    before = share[epochs < e_sem] if e_sem is not None else share
    facts.update(type_wrong_half_epoch=e_tw, semantic_half_epoch=e_sem, type_correct_peak_epoch=peak_tc,
                 semantic_peak_epoch=peak_sem, type_correct_majority_epoch=e_share,
                 max_type_correct_share_before=float(before.max()) if len(before) else None,
                 part_a=bool(a), part_b=bool(b), part_c=bool(c), literal_holds=bool(a and b))
    mark = lambda ok: "holds" if ok else "fails"  # noqa: E731
    share_before = _share(facts["max_type_correct_share_before"])
    evidence = (f"(a) type-wrong {tw[0]:.0f} {_reaches('falls to half', e_tw)}, semantic-correct "
                f"{_reaches(f'reaches half of {sem[-1]:.0f}', e_sem)}: {mark(a)}; (b) type-correct peaks at epoch {peak_tc} "
                f"({tc.max():.0f}), semantic-correct at {peak_sem} ({sem.max():.0f}): {mark(b)}; (c) type-correct "
                f"{_reaches(f'makes up >= {half:g} of the wrong predictions', e_share, first=True)} "
                + (f"(max share before epoch {e_sem}: {share_before})" if e_sem is not None
                   else f"(max share over all {len(epochs)} recorded epochs: {share_before})") + f": {mark(c)}")
    return bool(a and b and c), evidence, facts


def _reaches(what: str, epoch: int | float | None, first: bool = False) -> str:
    """``what`` at an epoch for an evidence line: "falls to half at epoch 3", or "never falls to
    half (in the recorded epochs)" when the epoch is None (the condition is never met)."""
    if epoch is None:
        return f"never {what} (in the recorded epochs)"
    return f"{what} {'first ' if first else ''}at epoch {epoch}"


def _share(value: float | None) -> str:
    """A share for the evidence line; "none" when no epoch came before (semantic half at epoch 0)."""
    return "none" if value is None else f"{value:.2f}"


def type_claims(facts: dict[str, Any], evidence: str, control: str = "") -> tuple[list[Claim], dict[str, Any]]:
    """type_before_fact (part (c)) from :func:`type_before_fact`'s numbers: the epoch lead (> 0:
    the type phase first; a phase that never happens is None, which fails); not testable where
    ``type_before_fact`` is (``evidence`` then says why). Also the descriptions (a) and (b),
    which held in their controls (docs/lm.md): {name: {value, statement}}."""
    spec = cs.TYPE_BEFORE_FACT
    if "part_a" not in facts:
        reason = evidence.removeprefix("not testable: ")
        return [spec.not_testable(reason, statement=spec.statement + control)], {}

    def lead(late: Any, early: Any) -> float | None:  # None: the event never happened (fails the claim)
        return None if late is None or early is None else float(late) - float(early)

    sem = facts["semantic_half_epoch"]
    described = {"type_wrong_falls_first": {"statement": cs.DESCRIPTIONS["type_wrong_falls_first"],
                                            "value": lead(sem, facts["type_wrong_half_epoch"]),
                                            "holds": facts["part_a"]},
                 "type_correct_peaks_first": {"statement": "the type-correct count peaks before the semantic-correct count",
                                              "type_correct_peak_epoch": facts["type_correct_peak_epoch"],
                                              "semantic_peak_epoch": facts["semantic_peak_epoch"], "holds": facts["part_b"]}}
    return [spec.result(lead(sem, facts["type_correct_majority_epoch"]), evidence, statement=spec.statement + control)], described


def raw_lead(counts: pd.DataFrame, half: float) -> float | None:
    """type_before_fact's value on a count table at ``half`` (NaN: the event never happens;
    None: not testable)."""
    _, _, facts = type_before_fact(counts, half)
    if "part_a" not in facts:
        return None
    sem, maj = facts["semantic_half_epoch"], facts["type_correct_majority_epoch"]
    return float("nan") if sem is None or maj is None else float(sem) - float(maj)


# --- against the no-attention baseline, on each model's facts' clock (issue 38) ---------------------------------------
def difference_claims(model: pd.DataFrame, baseline: pd.DataFrame | None, rule: str, half: float,
                      suffix: str = "", elsewhere: str | None = None) -> tuple[list[Claim], dict[str, Any]]:
    """``type_lead_beyond_baseline`` and ``type_share_beyond_baseline`` of one run on the facts'
    clock (:mod:`.phases`), each against the ``bow-last`` rate strongest for the alternative,
    with every rate's numbers and the epoch-based phases beside; not testable without the
    baseline's records, or when a clock cannot be read (the reason says which); not applicable
    to a model trained ``elsewhere`` (its source kind: no baseline saw its batches)."""
    specs = (cs.TYPE_LEAD_BEYOND_BASELINE, cs.TYPE_SHARE_BEYOND_BASELINE)
    counts = category_counts(model, rule=rule)
    mine = clock(counts, half)
    facts: dict[str, Any] = {"model": phase(counts, half).as_dict(), "model_clock": mine.as_dict()}
    if baseline is None and elsewhere is not None:
        reason = (f"a baseline claim; the model was trained elsewhere (source.kind={elsewhere}), so no baseline was "
                  "trained on its batches")
        return [s.not_applicable(reason, statement=s.statement + suffix) for s in specs], facts
    if baseline is None:
        reason = "no bow-last baseline was trained in this run (set baselines.kinds=[bow, bow-last])"
        return [s.not_testable(reason, statement=s.statement + suffix) for s in specs], facts
    theirs = {str(name): (phase(c, half), clock(c, half))
              for name, rows in baseline.groupby("baseline", sort=True)
              for c in [category_counts(rows, rule=rule)]}
    facts["baselines"] = {name: {"phase": ph.as_dict(), "clock": ck.as_dict()} for name, (ph, ck) in theirs.items()}
    if mine.reason is not None:
        return [s.not_testable(f"the transformer's facts' clock cannot be read: {mine.reason}", statement=s.statement + suffix)
                for s in specs], facts
    usable = {name: ck for name, (_, ck) in theirs.items() if ck.reason is None}
    if not usable:
        why = "; ".join(f"{name}: {ck.reason}" for name, (_, ck) in theirs.items())
        return [s.not_testable(f"no baseline rate has a facts' clock ({why})", statement=s.statement + suffix)
                for s in specs], facts
    skipped = "".join(f"; {name} left out: {ck.reason}" for name, (_, ck) in theirs.items() if ck.reason is not None)
    claims = []
    for spec, key in zip(specs, ("progress_lead", "progress_share")):
        ours = float(getattr(mine, key))
        per_rate = {name: float(getattr(ck, key)) for name, ck in usable.items()}
        strongest = max(per_rate, key=lambda n: per_rate[n])
        value = ours - per_rate[strongest]
        facts[f"{key}_difference"] = {"value": value, "against": strongest, "per_rate": {n: ours - v for n, v in per_rate.items()}}
        rates = ", ".join(f"{n} {v:.3f}" for n, v in per_rate.items())
        what = "lead on the facts' clock" if key == "progress_lead" else "type-correct share at matched fact progress"
        evidence = (f"{rule} rule, h = {half:g}: the transformer's {what} {ours:.3f} (shares at fact progress "
                    f"{_shares(mine)}; type majority at progress {_p(mine.majority_progress)}); bow-last by rate: {rates}; "
                    f"against the strongest, {strongest}{skipped}")
        if value <= 0:
            evidence += " (the transformer does not exceed the template-frequency baseline)"
        claims.append(spec.result(value, evidence, statement=spec.statement + suffix))
    return claims, facts


def _shares(ck: Clock) -> str:
    return ", ".join(f"{f}: {v:.2f}" for f, v in (ck.shares_at or {}).items())


def _p(progress: float | None) -> str:
    return "never" if progress is None else f"{progress:.2f}"


# --- syntax before semantics (issue 27; :data:`.claimspecs.SYNTAX_BEFORE_SEMANTICS`) ----------------------------------
# On the held-out records: each task's beat-the-prior epoch (:func:`.twotask.beat_epoch`, None: never). The value is
# SICK's epoch minus BLiMP's, > 0 holds. A task that never gets there is censored at the last record e_end: BLiMP at
# e_B, SICK never gives the bound e_end - e_B (> 0, holds); SICK at e_S, BLiMP never gives e_S - e_end (<= 0, fails).
# Not testable: no held-out records (task.heldout unset), neither task gets there, or both at the same record. A run
# of one of the two tasks (the each-task-alone control) gets the claim as not applicable, with its own epoch in
# details.two_task.
def _said(task: str, facts: dict[str, Any]) -> str:
    """One task in the evidence line, in words."""
    name, e = NAMES[task], facts["beat_prior_epoch"]
    if not facts["records"]:
        return f"{name}: no held-out records"
    def fmt(value: float | None) -> str:
        return "-" if value is None else f"{value:+.3f}"

    where = f"beats its prior from epoch {e}" if e is not None else "never beats its prior"
    return (f"{name} {where} (held-out accuracy - majority: {fmt(facts['eval.accuracy_minus_majority_end'])} at the "
            f"end, best {fmt(facts['eval.accuracy_minus_majority_max'])}; loss - floor "
            f"{fmt(facts['eval.loss_minus_floor_end'])} at the end)")


def syntax_claim(config: Config, frame: pd.DataFrame) -> tuple[Claim | None, dict[str, Any]]:
    """(the claim, ``details.two_task``) of a run with blimp and/or sick (the rule above); the
    claim is None for a run of one task without held-out records (nothing to say)."""
    spec = cs.SYNTAX_BEFORE_SEMANTICS
    tasks = [t for t in TASKS if t in config.task.tasks()]
    found: dict[str, Any] = {t: task_facts(frame, t) for t in tasks}
    found.update(margin=cs.PRIOR_MARGIN, records=cs.PRIOR_RECORDS, permuted_labels=bool(config.task.permute_labels))
    control = " (control: permuted labels; the claim should fail or be not testable)" if config.task.permute_labels else ""
    statement = spec.statement + control
    evidence = "; ".join(_said(t, found[t]) for t in tasks)
    if config.task.heldout is None:
        if len(tasks) < 2:
            return None, found
        return spec.not_testable("no held-out evaluation (task.heldout unset): the claim is judged on held-out examples only",
                                 statement=statement), found
    if len(tasks) < 2:
        return spec.not_applicable(f"one task trained ({tasks[0]} alone, the each-task-alone control): its own "
                                   "beat-the-prior epoch is in details.two_task", evidence, statement=statement), found
    b, s = found["blimp"], found["sick"]
    if min(b["records"], s["records"]) < cs.PRIOR_RECORDS:
        return spec.not_testable(f"fewer than {cs.PRIOR_RECORDS} held-out records", evidence, statement=statement), found
    e_b, e_s = b["beat_prior_epoch"], s["beat_prior_epoch"]
    if e_b is None and e_s is None:
        return spec.not_testable("neither task beats its prior on held-out examples: no order to test", evidence,
                                 statement=statement), found
    if e_b == e_s:
        return spec.not_testable(f"both tasks beat their prior from the same record (epoch {e_b})", evidence,
                                 statement=statement), found
    end = min(b["last_epoch"], s["last_epoch"])
    lead = (end if e_s is None else e_s) - (end if e_b is None else e_b)  # a never is censored at the last record
    if e_b is None or e_s is None:
        evidence += f"; censored at the last record (epoch {epoch_number(end)}): the value is a bound"
    found["lead"] = epoch_number(lead)
    return spec.result(float(lead), evidence, statement=statement), found


def _half_drop_at(epoch: int | float | None, step: int | float | None) -> str:
    """Where a task's loss first falls by half of its total drop, for an evidence line; a None
    (the per-epoch or the per-step loss never falls, or was not logged) is said in words."""
    if epoch is None and step is None:
        return "its loss never falls by half of a drop (no drop per epoch or per step)"
    at_epoch = f"at epoch {epoch}" if epoch is not None else "at no epoch (the per-epoch loss never falls)"
    at_step = f"step {step}" if step is not None else "no step: the per-step loss never falls"
    return f"half of the drop {at_epoch} ({at_step})"


def half_drop_claim(config: Config, frame: pd.DataFrame) -> tuple[Claim, dict[str, Any]]:
    """BLiMP's loss reaches half of its total drop before SICK's: at epoch resolution (the
    per-epoch evaluation), and when the two tie there, at step resolution (the per-task
    training loss, averaged over the ``train.log_every`` steps since the previous log)."""
    half = config.thresholds.half
    found = half_drop_facts(frame, half)
    e_b, e_s = found["blimp"]["half_drop_epoch"], found["sick"]["half_drop_epoch"]
    s_b, s_s = found["blimp"]["half_drop_step"], found["sick"]["half_drop_step"]
    lead, reason = None, ""  # SICK's half-drop time minus BLiMP's (> 0: syntax first)
    if e_b is None or e_s is None:
        reason = how = "a task's loss never falls"
    elif e_b != e_s:
        lead, how = float(e_s - e_b), "decided at epoch resolution"
    elif s_b is None or s_s is None or s_b == s_s:
        reason = how = "tied at epoch and step resolution"
    else:
        lead, how = float(s_s - s_b), f"tied at epoch {e_b}; decided at step resolution"
    fmt = lambda v: "-" if v is None else f"{v:.3f}"  # noqa: E731
    b, k = found["blimp"], found["sick"]
    evidence = (f"BLiMP loss {fmt(b['loss_0'])} -> {fmt(b['loss_min'])}, {_half_drop_at(e_b, s_b)}; "
                f"SICK {fmt(k['loss_0'])} -> {fmt(k['loss_min'])}, {_half_drop_at(e_s, s_s)}; {how}")
    statement = (f"syntax before semantics ({config.task.framing} framing): BLiMP's loss falls by {half:g} of its total drop "
                 "before SICK's (epochs; steps break a tie)")
    spec = cs.SYNTAX_BEFORE_SEMANTICS
    if lead is None:
        return spec.not_testable(reason, evidence, statement=statement), found
    return spec.result(lead, evidence, statement=statement), found


# --- the spectral claim over the runs of one config (:data:`.claimspecs.SPECTRAL_SMALL_DIRECTIONS_EARLY`) -------------
@dataclass(frozen=True, eq=False)
class SpectralClaim:
    """The claim's per-seed verdict (:class:`Claim`, ``over="every"``) with the over-seeds
    decision of the verdict engine (:func:`~stagewise.report.verdicts.decide_arm` with the claim's
    ``seeds_rule``): its interval of the median (None below the minimum seed count), sign test and word."""

    claim: Claim
    values: pd.DataFrame
    decision: verdicts.Decision

    @property
    def over_seeds(self) -> str:
        return self.decision.word

    def line(self) -> str:
        """The one-line verdict."""
        finite = self.values["value"].dropna()
        head = (f"{self.claim.id}: {self.claim.verdict} per seed ({int((finite > SPECTRAL.threshold).sum())}/{len(self.values)} "
                f"seeds with rho_early - rho_late > {SPECTRAL.threshold:g} at p = {CLAIM_P:g})")
        d = self.decision
        said = "; ".join(t for t in (d.reason, d.evidence) if t) or "no testable seed"
        return f"{head}; over seeds: {d.word} ({said})"


def spectral_claim(values: pd.DataFrame) -> SpectralClaim:
    """The per-seed Claim (every testable seed's value > threshold) and the over-seeds statistic."""
    finite = values.dropna(subset=["value"])
    by_seed = {int(s): float(v) for s, v in zip(values["seed"], values["value"])}
    parts = [f"seed {s}: rho {e:.3g} early, {l_:.3g} late" for s, e, l_ in zip(values["seed"], values["rho_early"], values["rho_late"])]
    evidence = "; ".join(parts) + f" (E = {', '.join(str(int(n)) for n in values['n'])} examples)"
    decision = verdicts.decide_arm({str(int(k)): float(v) for k, v in zip(finite["seed"], finite["value"])},
                                   SPECTRAL.seeds_rule())
    evidence += f"; over seeds: {decision.word}" + "".join(f"; {t}" for t in (decision.reason, decision.evidence) if t)
    untestable = sorted(set(by_seed) - set(int(s) for s in finite["seed"]))
    if untestable:
        reason = (f"seed{'s' if len(untestable) > 1 else ''} {', '.join(map(str, untestable))}: random-direction damage "
                  f"below {MIN_RANDOM_DAMAGE:g} (or no example correct at both checkpoints)")
        claim = SPECTRAL.not_testable(reason, evidence)
    else:
        claim = SPECTRAL.result(by_seed, evidence)
    return SpectralClaim(claim, values, decision)


# --- the claims over seeds (``Lab.across_runs``) ----------------------------------------------------------------------
# Runs grouped into families that differ only in the seed and the control, each claim judged by its declared aggregation
# (:func:`stagewise.report.seedstats.judge_over_seeds`) against the family's control runs. A run's seed key is (seed,
# task.sample_seed): the real run and a control run of one key saw the same init, training order and subsample: they pair.

SEED_FIELDS = (("seed",), ("task", "sample_seed"), ("task", "shuffle_groups"), ("task", "replace_answers"),
               ("task", "permute_labels"), ("task", "prompts"), ("task", "subject_repeat"), ("task", "prompt_suffix"))
"""Config fields that vary within a family (the seed key, the control and the mechanism arm); everything else defines it."""
REAL = "real"
ARMS = {"harder type cue": cs.TYPE_PHASE_HARDER_CUE, "easier facts": cs.TYPE_PHASE_EASIER_FACTS,
        "moved type cue": cs.TYPE_PHASE_MOVED_CUE}
"""The mechanism test's arms (:func:`arm_name`) and the claim each is judged by against the real runs."""


# --- a researcher's order claims on probe metrics (issue 39) ---------------------------------------------------------
def order_claims(config: Config, frame: pd.DataFrame) -> tuple[list[Claim], dict[str, Any]]:
    """``probe_order_{id}`` for each declared ``order`` claim: the lead (steps) of ``then``'s
    reach over ``first``'s (:func:`stagewise.measure.stages.order_of`, ``sustain`` records in a
    row); > 0 holds. ``first`` never reached: None (fails); neither: not testable (the thresholds
    are beyond what the model attains in this run); a metric the run did not record: not testable."""
    from ...measure.stages import order_of

    claims, facts = [], {}
    for declared in config.order:
        first, then = declared.condition("first"), declared.condition("then")
        statement = f"{declared.first} is reached before {declared.then} (sustained over {declared.sustain} records)"
        try:
            order = order_of(frame, first, then, declared.sustain)
        except ValueError as err:
            claims.append(cs.PROBE_ORDER.not_testable(f"the run did not record it ({err})", case=declared.id,
                                                      statement=statement))
            continue
        facts[declared.id] = {"first_step": order.first_step, "then_step": order.then_step, "last_step": order.last_step}
        evidence = (f"{first[0]} {first[1]} {first[2]:g} {_reached(order.first_step, order.last_step)}; "
                    f"{then[0]} {then[1]} {then[2]:g} {_reached(order.then_step, order.last_step)}")
        if not order.testable:
            claims.append(cs.PROBE_ORDER.not_testable("neither threshold is reached in this run (beyond what the model "
                                                      "attains here)", evidence, case=declared.id, statement=statement))
            continue
        claims.append(cs.PROBE_ORDER.result(order.lead, evidence, seeds=config.seed_list(), case=declared.id,
                                            statement=statement))
    return claims, facts


def _reached(step: float | None, last: float) -> str:
    return f"not reached by the last record (step {last:g})" if step is None else f"reached at step {step:g}"


def control_name(config: Config) -> str | None:
    """The control a run is (docs/lm.md "Controls"), or None."""
    names = [n for n, on in (("shuffled groups", config.task.shuffle_groups),
                             ("frequency-matched answers", config.task.replace_answers),
                             ("permuted labels", config.task.permute_labels)) if on]
    return " + ".join(names) or None


def arm_name(config: Config) -> str | None:
    """The mechanism arm a run is (None: not an arm): task.prompts=paraphrase is the harder type cue,
    task.subject_repeat > 1 the easier facts, a task.prompt_suffix the moved cue; any two at once,
    or task.prompts=rewrite, is an arm with no declared prediction ("other arm")."""
    t = config.task
    on = [name for name, active in (("harder type cue", t.prompts == "paraphrase"), ("easier facts", t.subject_repeat > 1),
                                    ("moved type cue", bool(t.prompt_suffix))) if active]
    if len(on) == 1 and t.prompts in ("all", "paraphrase"):
        return on[0]
    return None if not on and t.prompts == "all" else "other arm"


def family_key(config: Config) -> str:
    """The config without its seed key and control, as canonical JSON."""
    data = canonical(config)
    for path in SEED_FIELDS:
        node = data
        for part in path[:-1]:
            node = node.get(part, {})
        node.pop(path[-1], None)
    return json.dumps(data, sort_keys=True)


def across_runs(runs: Sequence[tuple[Config, Summary]]) -> list[Claim]:
    """Every claim with a declared aggregation, per family with at least one real run and
    more than one run: ``{id}_over_seeds`` (``_over_seeds_2``, ... for further families)."""
    families: dict[str, list[tuple[Config, Summary]]] = {}
    for config, summary in runs:
        families.setdefault(family_key(config), []).append((config, summary))
    out: list[Claim] = []
    numbered = [members for members in families.values()
                if len(members) > 1 and any(control_name(c) is None and arm_name(c) is None for c, _ in members)]
    for i, members in enumerate(numbered, start=1):
        label = _label(members[0][0]) + (f", family {i}" if len(numbered) > 1 else "")
        case = "over_seeds" if i == 1 else f"over_seeds_{i}"
        out += _mechanism_claims(members, case, label)
        members = [(c, s) for c, s in members if arm_name(c) is None]
        for spec, claim_id in _aggregated(members):
            by_condition: dict[str, dict[str, float | None]] = {}
            for config, summary in members:
                claim = next((c for c in summary.claims if c.spec_id == spec.id and (claim_id is None or c.id == claim_id)),
                             None)
                if claim is None or claim.verdict == "not applicable":
                    continue
                condition = by_condition.setdefault(control_name(config) or REAL, {})
                if claim.verdict == "not testable":  # the run could not measure it: a seed without a value (it
                    continue  # counts as unfinished; paired: no difference for it)
                # None: the event never happened (the phase), a failing seed (paired: the failing end of the scale)
                condition[f"{config.seed}/{config.task.sample_seed}"] = claim.value
            if REAL not in by_condition:
                continue
            real = by_condition.pop(REAL)
            # an order claim's case (probe_order_ID -> ID_over_seeds): the id is probe_order_ID_over_seeds
            own = case if claim_id is None else f"{claim_id.removeprefix(spec.id + '_')}_{case}"
            out.append(judge_over_seeds(spec, real, by_condition, case=own, label=label))
    return out


def _aggregated(members: Sequence[tuple[Config, Summary]]) -> list[tuple[Any, str | None]]:
    """(spec, claim id or None) of every claim judged over seeds: the declared claims with an
    aggregation (the mechanism claims apart), and each case of the researcher's order claims
    (``probe_order_{id}``) the runs hold."""
    out: list[tuple[Any, str | None]] = [(spec, None) for spec in CLAIMS
                                         if spec.aggregation is not None and spec not in cs.MECHANISM_CLAIMS
                                         and spec is not cs.PROBE_ORDER]
    cases = dict.fromkeys(c.id for _, summary in members for c in summary.claims if c.spec_id == cs.PROBE_ORDER.id)
    return out + [(cs.PROBE_ORDER, cid) for cid in cases]


def progress_share(summary: Summary) -> float | None:
    """The model's mean type-correct share at matched fact progress in a run's summary (None: no clock)."""
    clock_ = ((summary.details or {}).get("baseline_comparison") or {}).get("model_clock") or {}
    value = clock_.get("progress_share")
    return float(value) if value is not None else None


def _mechanism_claims(members: Sequence[tuple[Config, Summary]], case: str, label: str) -> list[Claim]:
    """Each mechanism arm present among a family's runs against its real runs, paired by seed key:
    per seed the arm's progress share minus the real run's; a seed without a clock in either run
    is left out (it counts as unfinished). Manipulation checks in the evidence."""
    real = {_key(c): s for c, s in members if control_name(c) is None and arm_name(c) is None}
    out = []
    for arm, spec in ARMS.items():
        runs = {_key(c): s for c, s in members if control_name(c) is None and arm_name(c) == arm}
        if not runs:
            continue
        diffs: dict[str, float | None] = {}
        checks: list[str] = []
        for key, summary in runs.items():
            a, r = progress_share(summary), progress_share(real[key]) if key in real else None
            if a is not None and r is not None:
                diffs[key] = a - r
                checks.append(_manipulation(arm, summary, real[key]))
        claim = judge_over_seeds(spec, diffs, {}, case=case, label=f"{label}, arm: {arm}")
        check = f"manipulation check per seed: {'; '.join(checks) or 'none'}"
        out.append(claim.model_copy(update={"evidence": f"{claim.evidence}; {check}" if claim.evidence else check}))
    return out


def _key(config: Config) -> str:
    return f"{config.seed}/{config.task.sample_seed}"


def _manipulation(arm: str, arm_run: Summary, real_run: Summary) -> str:
    """The arm's manipulation check in words: the facts' half-way epoch (easier facts) or the
    strongest bow-last share at matched progress (harder type cue), arm vs real."""
    def facts_half(s: Summary) -> Any:
        return ((s.details or {}).get("baseline_comparison") or {}).get("model", {}).get("semantic_half_epoch")

    def baseline_share(s: Summary) -> Any:
        rates = ((s.details or {}).get("baseline_comparison") or {}).get("baselines") or {}
        shares = [b["clock"]["progress_share"] for b in rates.values() if b["clock"]["progress_share"] is not None]
        return round(max(shares), 3) if shares else None

    if arm == "easier facts":
        a, r = facts_half(arm_run), facts_half(real_run)
        return f"facts half-way at epoch {_epoch(a)} vs {_epoch(r)}"
    # the harder and the moved cue
    return f"bow-last share {baseline_share(arm_run)} vs {baseline_share(real_run)}"


def _epoch(value: Any) -> str:
    return f"{value:.3g}" if isinstance(value, (int, float)) else str(value)


def _label(config: Config) -> str:
    return f"{config.task.name}, {config.model.name or 'tiny'}, {config.train.epochs} epochs"
