"""Summary and claims of the LM lab, computed from the run's records only (the
``predictions`` / ``sentence_losses`` tables and the logged epoch metrics).

Claims (thresholds fixed before any run: ``thresholds.half`` = 0.5):

* ``type_before_fact`` (answer framing, part (c)): before the epoch where the
  semantic-correct count reaches half its final value there is an epoch where type-correct
  makes up at least half of the wrong predictions; ``type_wrong_falls_first`` (a): the
  type-wrong count falls to half its epoch-0 value before that epoch;
  part (b), the type-correct count peaks (first maximum) before the semantic-correct count
  does, is recorded but not a claim: on 3 seeds it held in every seed of both controls
  (docs/lm.md), so it cannot tell a type phase from its controls. Judged by
  ``thresholds.type_rule`` (open by default). Not testable:
  fewer than 2 epochs, no type-wrong example at epoch 0, or no semantic-correct example at
  the end. Declared in :mod:`.claimspecs`.
* ``syntax_before_semantics`` (runs with blimp and sick): on held-out examples, BLiMP beats
  its label prior at an earlier record than SICK (:mod:`.twotask`, issue 27). The
  earlier measure, the epoch where each task's training loss has fallen by half of its total
  drop (:func:`syntax_claim`), is kept as a description in ``details.syntax_half_drop``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from ...measure import detect_stages
from ...report.claims import Claim, Stats, Summary
from ..contract import RunResult, Tables
from ...config import canonical
from ...report.seedstats import judge_over_seeds

from . import claimspecs as cs
from .categories import CATEGORIES
from .config import Config
from .twotask import stage_conditions as twotask_stages, syntax_claim as twotask_claim
from . import typeclaims
from .typeclaims import category_counts, rule_column
from .claimspecs import CLAIMS


def rule_agreement(predictions: pd.DataFrame) -> dict[str, Any] | None:
    """Closed vs open rule per epoch: {epoch: {closed category: {open category: count}}}, and
    per category the fraction of its closed-rule examples that the open rule puts in the same
    category (excluded examples left out), at epoch 0 (the first epoch) and at the closed
    rule's type-correct peak. None without open-rule records."""
    if rule_column(predictions, "open") is None:
        return None
    table = predictions.groupby(["epoch", "category", "category_open"]).size()
    crosstab: dict[str, dict[str, dict[str, int]]] = {}
    for (epoch, closed, opened), n in table.items():
        crosstab.setdefault(str(_num(epoch)), {}).setdefault(str(closed), {})[str(opened)] = int(n)
    counts = category_counts(predictions)
    first = counts.index[0]
    peak = counts.index[int(np.argmax(counts["type-correct"].to_numpy()))]

    def agreement(epoch: Any) -> dict[str, float | None]:
        rows = predictions[(predictions["epoch"] == epoch) & (predictions["category_open"] != "excluded")]
        out: dict[str, float | None] = {}
        for c in CATEGORIES:
            mine = rows[rows["category"] == c]
            out[c] = float((mine["category_open"] == c).mean()) if len(mine) else None
        out["all"] = float((rows["category"] == rows["category_open"]).mean()) if len(rows) else None
        return out

    return {"crosstab": crosstab, "first_epoch": _num(first), "type_correct_peak_epoch": _num(peak),
            "agreement_first": agreement(first), "agreement_peak": agreement(peak),
            "excluded": int((predictions[predictions["epoch"] == first]["category_open"] == "excluded").sum())}


def _num(x: Any) -> int | float:
    """An epoch as an int when it is whole (epoch ends), else a float (sub-epoch evaluations)."""
    x = float(x)
    return int(x) if x.is_integer() else round(x, 4)


def first_epoch(epochs: np.ndarray, condition: np.ndarray) -> int | float | None:
    hits = np.nonzero(condition)[0]
    return _num(epochs[hits[0]]) if len(hits) else None


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
    if e_sem == _num(epochs[0]):  # the facts are already at half at the first record: no epoch comes before them
        facts.update(semantic_half_epoch=e_sem)
        return None, (f"not testable: semantic-correct is already at {half:g} of its final count ({sem[0]:.0f} of "
                      f"{sem[-1]:.0f}) at the first recorded epoch {e_sem}: no epoch comes before the facts"), facts
    settling = typeclaims.facts_settled(epochs.astype(float), sem)
    if not settling.settled:  # the claim is measured against the final count: a count still rising cannot carry it
        facts.update(settling=settling.text())
        return None, f"not testable: the facts were still rising at the last record ({settling.text()})", facts
    peak_tc, peak_sem = _num(epochs[int(np.argmax(tc))]), _num(epochs[int(np.argmax(sem))])
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


def half_drop_epoch(epochs: np.ndarray, loss: np.ndarray, half: float) -> int | float | None:
    """First epoch where loss[0] - loss[e] >= half * (loss[0] - min loss) (a float for a
    sub-epoch evaluation, see :func:`_num`); None if it never falls."""
    drop = loss[0] - np.nanmin(loss)
    if not np.isfinite(drop) or drop <= 0:
        return None
    return first_epoch(epochs, loss[0] - loss >= half * drop)


def _half_drop_at(epoch: int | float | None, step: int | float | None) -> str:
    """Where a task's loss first falls by half of its total drop, for an evidence line; a None
    (the per-epoch or the per-step loss never falls, or was not logged) is said in words."""
    if epoch is None and step is None:
        return "its loss never falls by half of a drop (no drop per epoch or per step)"
    at_epoch = f"at epoch {epoch}" if epoch is not None else "at no epoch (the per-epoch loss never falls)"
    at_step = f"step {step}" if step is not None else "no step: the per-step loss never falls"
    return f"half of the drop {at_epoch} ({at_step})"


def epoch_series(frame: pd.DataFrame, metric: str) -> tuple[np.ndarray, np.ndarray]:
    """(epochs, values) of an epoch-level metric (logged with the metric ``epoch`` at the same step)."""
    wide = frame[frame["metric"].isin(["epoch", metric])].pivot_table(index="step", columns="metric", values="value")
    if metric not in wide or "epoch" not in wide:
        return np.array([], dtype=float), np.array([])
    wide = wide.dropna(subset=["epoch", metric]).sort_index()
    return wide["epoch"].to_numpy(float), wide[metric].to_numpy(float)


def step_series(frame: pd.DataFrame, metric: str) -> tuple[np.ndarray, np.ndarray]:
    """(steps, values) of a per-step metric."""
    rows = frame[frame["metric"] == metric].sort_values("step")
    return rows["step"].to_numpy().astype(int), rows["value"].to_numpy(float)


def syntax_claim(config: Config, frame: pd.DataFrame) -> tuple[Claim, dict[str, Any]]:
    """BLiMP's loss reaches half of its total drop before SICK's: at epoch resolution (the
    per-epoch evaluation), and when the two tie there, at step resolution (the per-task
    training loss, averaged over the ``train.log_every`` steps since the previous log)."""
    half = config.thresholds.half
    found: dict[str, Any] = {}
    for task in ("blimp", "sick"):
        epochs, loss = epoch_series(frame, f"train.loss.{task}")
        steps, batch = step_series(frame, f"train.batch_loss.{task}")
        found[task] = {"half_drop_epoch": half_drop_epoch(epochs, loss, half) if len(loss) else None,
                       "half_drop_step": half_drop_epoch(steps, batch, half) if len(batch) else None,
                       "loss_0": float(loss[0]) if len(loss) else None, "loss_min": float(np.nanmin(loss)) if len(loss) else None,
                       "loss_final": float(loss[-1]) if len(loss) else None}
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



def _at_evaluations(frame: pd.DataFrame, metric: str) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """{seed: (steps, values)} of an evaluation metric, by step."""
    rows = frame[frame["metric"] == metric].sort_values("step")
    return {int(seed): (g["step"].to_numpy(float), g["value"].to_numpy(float)) for seed, g in rows.groupby("seed")}


def stage_detection(config: Config, frame: pd.DataFrame) -> dict[str, Any] | None:
    """Per-seed stage boundaries in optimizer steps, in the shape of
    :meth:`~stagewise.measure.StageReport.as_dict`, from the evaluations (epoch ends and
    ``train.eval_every``), with the claims' own conditions (h = ``thresholds.half``):

    * answer framing: ``type_wrong_halved`` (type-wrong count <= h x its first count),
      ``type_correct_majority`` (type-correct >= h of the wrong predictions, some wrong),
      ``semantic_half`` (semantic-correct >= h x its last count): the steps of the epochs
      ``type_before_fact`` compares (left out when its count is 0 at the reference point);
    * blimp / sick with held-out records: ``blimp_beats_prior`` / ``sick_beats_prior`` (the
      held-out accuracy beats the majority share by the declared margin from this record on,
      :func:`.twotask.stage_conditions`), as ``syntax_before_semantics`` reads them.

    None when no stage applies. Each condition is logged as a derived value that is >= 0
    exactly when it holds, so a crossing is the first evaluation where the claim's test passes."""
    h = config.thresholds.half
    derived: list[pd.DataFrame] = []
    if config.task.framing == "answer":
        rule = config.thresholds.type_rule
        suffix = f"_{rule}" if rule != "closed" and (frame["metric"] == f"train.type_correct_{rule}").any() else ""
        counts = {c: _at_evaluations(frame, f"train.{c}{suffix if c != 'semantic_correct' or suffix == '_user' else ''}")
                  for c in ("type_wrong", "type_correct", "semantic_correct")}
        for seed, (steps, tw) in counts["type_wrong"].items():
            tc, sem = counts["type_correct"][seed][1], counts["semantic_correct"][seed][1]
            wrong = tc + tw
            rows = {"type_wrong_halved": h * tw[0] - tw if tw[0] > 0 else None,
                    "type_correct_majority": np.where(wrong > 0, tc - h * wrong, np.nan),
                    "semantic_half": sem - h * sem[-1] if sem[-1] > 0 else None}
            derived += [pd.DataFrame({"step": steps, "seed": seed, "metric": n, "value": v})
                        for n, v in rows.items() if v is not None]
    derived += twotask_stages(config, frame)  # {blimp,sick}_beats_prior: syntax_before_semantics's condition
    if not derived:
        return None
    table = pd.concat(derived, ignore_index=True)
    names = list(dict.fromkeys(table["metric"]))
    return detect_stages(table, {n: (n, 0.0, "above") for n in names}).as_dict()


def _baseline_counts(frame: pd.DataFrame | None, rule: str) -> dict[str, Any] | None:
    """{baseline: {epoch: {category: count}}} of the question tasks under ``rule``."""
    rows = typeclaims.question_predictions(frame)
    if rows is None:
        return None
    return {str(name): {str(_num(e)): {c: int(v) for c, v in row.items()}
                        for e, row in category_counts(group, rule=rule).iterrows()}
            for name, group in rows.groupby("baseline", sort=False)}


def control_name(config: Config) -> str | None:
    """The control a run is (docs/lm.md "Controls"), or None."""
    names = [n for n, on in (("shuffled groups", config.task.shuffle_groups),
                             ("frequency-matched answers", config.task.replace_answers),
                             ("permuted labels", config.task.permute_labels)) if on]
    return " + ".join(names) or None


def _by_epoch(counts: pd.DataFrame) -> dict[str, dict[str, int]]:
    """A category table (epochs x categories) as ``{epoch: {category: count}}`` for summary.json."""
    return {str(_num(e)): {c: int(v) for c, v in row.items()} for e, row in counts.iterrows()}


def summarize(config: Config, frame: pd.DataFrame, tables: Tables, result: RunResult) -> Summary:
    """The Summary: final epoch metrics, the per-epoch category counts, the claims and
    ``stage_detection`` (:func:`stage_detection`)."""
    extras = result.extras
    epoch_rows = frame[frame["metric"] == "epoch"]
    final_step = int(epoch_rows["step"].max()) if len(epoch_rows) else 0
    at_end = frame[(frame["step"] == final_step) & frame["metric"].str.startswith(("train.", "eval.", "baseline."))
                    & ~frame["metric"].str.startswith("train.batch_loss")]
    final = {m: Stats.of([v]) for m, v in zip(at_end["metric"], at_end["value"])}
    details: dict[str, Any] = {"model": extras.get("model"), "examples": extras.get("examples"),
                               "dropped_multi_token": extras.get("dropped", {}), "steps": extras.get("steps"),
                               "control": control_name(config), "framing": config.task.framing,
                               "record": config.train.record, "replaced_answers": extras.get("replaced_answers"),
                               "type_rule_excluded": extras.get("type_rule_excluded")}
    claims = _type_part(config, tables, details)
    if {"blimp", "sick"} <= set(config.task.tasks()):
        details["syntax_half_drop"] = syntax_claim(config, frame)[1]  # the earlier measure, descriptive only
    syntax, details["two_task"] = twotask_claim(config, frame)  # issue 27: held-out, above each task's prior
    if syntax is not None:
        claims.append(syntax)
    stages = stage_detection(config, frame)
    if stages is not None:
        details["stage_detection"] = stages
    # one fine-tuned model per run: its seed's final values, as the other labs give theirs (the claims' values are
    # in the claims), and the subsample seed that, with the seed, pairs it with its controls
    values = {"sample_seed": config.task.sample_seed, **{m: stats.mean for m, stats in final.items()}}
    per_seed = {str(seed): values for seed in config.seed_list()}
    return Summary(lab="lm", seeds=config.seed_list(), final=final, per_seed=per_seed, claims=claims, details=details)


def _type_part(config: Config, tables: Tables, details: dict[str, Any]) -> list[Claim]:
    """The type claims of the question tasks' predictions (and their details, written into
    ``details``): "not applicable" for a run that has predictions but no question task, none
    without predictions."""
    half = config.thresholds.half
    every = tables.get("predictions")
    predictions = typeclaims.question_predictions(every)
    if predictions is None:
        if every is None or not len(every):
            return []
        reason = (f"a type claim; this run's tasks ({', '.join(config.task.tasks())}) answer with label words, not typed "
                  "answers of a question")
        return [spec.not_applicable(reason) for spec in cs.TYPE_CLAIMS]
    rule = config.thresholds.type_rule if rule_column(predictions, config.thresholds.type_rule) else "closed"
    details["type_rule"] = rule
    counts = category_counts(predictions)
    details["category_counts"] = _by_epoch(counts)
    agreement = rule_agreement(predictions)
    if agreement is not None:
        details["category_counts_open"] = _by_epoch(category_counts(predictions, rule="open"))
        details["type_rules"] = agreement
        details["type_before_fact_closed"] = type_before_fact(counts, half)[2]
    counts = category_counts(predictions, rule=rule)
    if len(config.task.tasks()) > 1:
        details["category_counts_per_task"] = {task: _by_epoch(category_counts(every, task)) for task in config.task.tasks()}
    _, evidence, facts = type_before_fact(counts, half)
    details["type_before_fact"] = facts
    control = f" (control: {details['control']}; the claim should fail or be null)" if details["control"] else ""
    raw, described = type_claims(facts, evidence, control + f" [{rule} type rule]")
    baseline = typeclaims.reference_rows(tables.get("baseline_predictions"))
    elsewhere = config.source.kind if config.source.kind != "train" else None
    differences, compared = typeclaims.difference_claims(predictions, baseline, rule, half, control + f" [{rule} type rule]",
                                                         elsewhere)
    details["descriptions"] = described
    details["baseline_comparison"] = compared
    details["baselines"] = _baseline_counts(tables.get("baseline_predictions"), rule)
    details["sensitivity"] = typeclaims.sensitivity(predictions, baseline, raw_lead)
    peak = counts.index[int(np.argmax(counts["type-correct"].to_numpy()))] if len(counts) else None
    prior = typeclaims.question_ignoring_prior(predictions, peak) if peak is not None else None
    if prior is not None:
        details["question_ignoring_prior"] = prior
    return raw + differences


# The lm claims over seeds (``Lab.across_runs``): runs grouped into families that differ only
# in the seed and the control, each claim judged by its declared aggregation
# (:func:`stagewise.report.seedstats.judge_over_seeds`) against the family's control runs.
#
# A run's seed key is (``seed``, ``task.sample_seed``): the real run and a control run of the same
# key saw the same initialisation, training order and subsample, so their values pair.

SEED_FIELDS = (("seed",), ("task", "sample_seed"), ("task", "shuffle_groups"), ("task", "replace_answers"),
               ("task", "permute_labels"), ("task", "prompts"), ("task", "subject_repeat"), ("task", "prompt_suffix"))
"""Config fields that vary within a family (the seed key, the control and the mechanism arm); everything else defines it."""

REAL = "real"
ARMS = {"harder type cue": cs.TYPE_PHASE_HARDER_CUE, "easier facts": cs.TYPE_PHASE_EASIER_FACTS,
        "moved type cue": cs.TYPE_PHASE_MOVED_CUE}
"""The mechanism test's arms (:func:`arm_name`) and the claim each is judged by against the real runs."""


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
        for spec in CLAIMS:
            if spec.aggregation is None or spec in cs.MECHANISM_CLAIMS:
                continue
            by_condition: dict[str, dict[str, float | None]] = {}
            for config, summary in members:
                claim = next((c for c in summary.claims if c.spec_id == spec.id), None)
                if claim is None or claim.verdict == "not applicable":
                    continue
                key = f"{config.seed}/{config.task.sample_seed}"  # not testable: None, a seed without a value
                value = claim.value if claim.verdict != "not testable" else None  # (paired: no difference for it)
                by_condition.setdefault(control_name(config) or REAL, {})[key] = value
            if REAL not in by_condition:
                continue
            real = by_condition.pop(REAL)
            out.append(judge_over_seeds(spec, real, by_condition, case=case, label=label))
    return out


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
        return f"facts half-way at epoch {facts_half(arm_run)} vs {facts_half(real_run)}"
    # the harder and the moved cue
    return f"bow-last share {baseline_share(arm_run)} vs {baseline_share(real_run)}"


def _label(config: Config) -> str:
    return f"{config.task.name}, {config.model.name or 'tiny'}, {config.train.epochs} epochs"
