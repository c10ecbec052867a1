"""Tables ``stagewise show`` prints from an lm summary (``Lab.summary_tables``); imports nothing heavy."""

from __future__ import annotations

from ...report.claims import Summary
from ..contract import SummaryTable


def _mark(ok: object) -> str:
    return "-" if ok is None else "holds" if ok else "fails"


def sensitivity_table(summary: Summary) -> SummaryTable | None:
    """``details.sensitivity``: the type claims at h = 0.4 / 0.5 / 0.6 under both rules, beside
    the declared verdict (open rule, h = 0.5)."""
    rows = summary.details.get("sensitivity")
    if not isinstance(rows, list) or not rows:
        return None
    out = []
    for r in rows:
        out.append((f"{r['rule']} rule, h = {r['h']:g}", r.get("type_before_fact"), _mark(r.get("type_before_fact_holds")),
                    r.get("lead_difference"), _mark(r.get("lead_holds")), r.get("share_difference"), _mark(r.get("share_holds"))))
    return SummaryTable(("sensitivity (declared: open rule, h = 0.5)", "type_before_fact lead", "", "lead - baseline's", "",
                         "max share - baseline's", ""), tuple(out))


def baselines_table(summary: Summary) -> SummaryTable | None:
    """``details.baseline_comparison``: the model's and the bow-last baseline's phase numbers."""
    compared = summary.details.get("baseline_comparison")
    if not isinstance(compared, dict) or "baseline" not in compared:
        return None
    rows = tuple((name, entry.get("majority_epoch"), entry.get("semantic_half_epoch"), entry.get("lead"), entry.get("max_share"),
                  entry.get("phase_share"))
                 for name, entry in (("transformer", compared["model"]),
                                     (str(compared.get("baseline_name", "baseline")), compared["baseline"])))
    return SummaryTable(("type phase (declared rule and h)", "type majority epoch", "facts half-way epoch", "lead (epochs)",
                         "max share before facts", "phase share (0 without a phase)"), rows)


def prior_table(summary: Summary) -> SummaryTable | None:
    """``details.question_ignoring_prior``: per asked kind, how often it is predicted when asked
    and when another kind is asked, at the type-correct peak."""
    prior = summary.details.get("question_ignoring_prior")
    if not isinstance(prior, dict) or not prior.get("kinds"):
        return None
    rows = tuple((kind, e["questions"], e["share_when_asked"], e["share_when_not_asked"]) for kind, e in prior["kinds"].items())
    rows += (("(all typed questions)", sum(e["questions"] for e in prior["kinds"].values()), prior.get("right_kind_share"),
              prior.get("question_blind_share")),)
    return SummaryTable((f"prior that ignores the question (epoch {prior['epoch']:g})", "questions", "share of the kind when asked",
                         "when another kind is asked"), rows)
