"""The claims x runs matrix every report starts with, as data (no markup).

Rows are claims grouped by source (:func:`~stagewise.report.claims.source_groups` order:
the papers, each under the heading its lab declares (``sources``: paper key -> heading),
reviewers, own checks, then :data:`UNDECLARED` for claims of version-1 summaries, ``source``
None); columns are
runs (a run page: one; a reproduce page: each run; a sweep: each point). A claim's
declaration (statement, source, condition ``quantity relation threshold``, floor, control)
is a :class:`ClaimRow`, given once; each :class:`Cell` is one verdict in the one vocabulary
(:data:`~stagewise.report.claims.VERDICTS`: holds / fails / not testable), the judged value
(``SIGNIFICANT`` digits), ``k/n`` seeds passing when a run has more than one seed, the
reason when not testable, and an href to the evidence.

Also the text of every value shown in a report: :func:`number`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from .claims import VERDICTS, Claim, source_groups

SIGNIFICANT = 4
"""Significant digits of every float shown in a report (``f"{x:.4g}"``)."""

NONE_TEXT = "–"
"""How a missing value (None, NaN) is shown in a table."""

UNDECLARED = "undeclared"
UNDECLARED_HEADING = "undeclared (no source recorded: version-1 summaries)"
"""The group of claims without a declared source, last."""

ABSENT = ""
"""A cell's verdict where the run has no such claim."""

REASON_CHARS = 90
"""Characters of a not-testable reason shown in its cell (the whole reason: hover text and evidence)."""

TITLE_CHARS = 300
"""Characters of an undeclared claim's evidence shown as its cell's hover text."""

CSS_CLASS = {"holds": "holds", "fails": "fails", "inconclusive": "inconclusive", "not testable": "nottestable",
             "not applicable": "notapplicable",
             ABSENT: "absent"}
"""Verdict -> css class of its cell."""


def _plain(value: Any) -> Any:
    """A numpy scalar as the Python value it holds; anything else unchanged."""
    if type(value).__module__ == "numpy" and hasattr(value, "item"):
        try:
            return value.item()
        except (ValueError, TypeError):
            return value
    return value


def number(value: Any) -> str:
    """A compact text for a table cell: floats to ``SIGNIFICANT`` digits, bools yes/no,
    None and NaN as ``NONE_TEXT``; anything else ``str``. Not escaped (templates escape)."""
    value = _plain(value)
    if value is None or value is pd.NA or value is pd.NaT:
        return NONE_TEXT
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return NONE_TEXT if math.isnan(value) else f"{value:.{SIGNIFICANT}g}"
    return str(value)


def is_number(value: Any) -> bool:
    """Whether a cell is numeric (then right-aligned)."""
    value = _plain(value)
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def element_id(*parts: str) -> str:
    """An element id (``[A-Za-z0-9_-]`` only) from names: ``element_id("ev", "a/b", "c")`` ->
    ``ev-a-b-c``."""
    return "-".join(re.sub(r"[^A-Za-z0-9_-]", "-", p) for p in parts)


@dataclass(frozen=True)
class ClaimRow:
    """A claim's declaration, shown once: ``label`` (the id, lab-prefixed on a page over
    several labs), statement, source label, condition, floor, control; ``group`` the
    source's group (:attr:`~stagewise.report.claims.Source.group`) or :data:`UNDECLARED`."""

    key: str
    label: str
    statement: str
    group: str
    source: str = ""
    condition: str = ""
    floor: str = ""
    control: str = ""


@dataclass(frozen=True)
class Cell:
    """One run's verdict on one claim: ``verdict`` (:data:`VERDICTS`, or :data:`ABSENT`),
    ``value`` (formatted, "" when none), ``fraction`` (``k/n`` seeds, "" for one seed),
    ``reason`` (not testable), ``href`` (the evidence), ``title`` (hover text)."""

    verdict: str
    value: str = ""
    fraction: str = ""
    reason: str = ""
    href: str | None = None
    title: str = ""
    partial: bool = False

    @property
    def css(self) -> str:
        return CSS_CLASS[self.verdict] + (" partial" if self.partial else "")


@dataclass(frozen=True)
class Column:
    """One run (or sweep point): its label, the href of its evidence, its status; ``lines``
    the header shown in place of the label, one line each (a sweep point's axis values;
    the label is then the header's hover text)."""

    label: str
    href: str | None = None
    status: str = "done"
    lines: tuple[str, ...] = ()

    @property
    def failed(self) -> bool:
        return self.status != "done"

    @property
    def heading(self) -> tuple[str, ...]:
        """The header's lines: ``lines``, else the label."""
        return self.lines or (self.label,)


@dataclass(frozen=True)
class Group:
    """The rows of one source group: its key (a paper's ``paper:KEY``, a kind, or
    :data:`UNDECLARED`) and its heading."""

    key: str
    heading: str
    rows: tuple[tuple[ClaimRow, tuple[Cell, ...]], ...]


@dataclass(frozen=True)
class Matrix:
    """Claims (grouped by source) x columns; ``counts`` cells per verdict."""

    columns: tuple[Column, ...]
    groups: tuple[Group, ...]

    @property
    def n_claims(self) -> int:
        return sum(len(g.rows) for g in self.groups)

    def defined_rows(self) -> list[ClaimRow]:
        """Rows that declare a floor or a control (the page's one table of them)."""
        return [row for g in self.groups for row, _ in g.rows if row.floor or row.control]

    @property
    def n_checks(self) -> int:
        """Claim checks: the cells with a verdict (one claim judged in one run or point), what
        :meth:`counts` counts and the CLI's "k of n claim checks hold" counts."""
        return sum(self.counts().values())

    def counts(self) -> dict[str, int]:
        """Claim checks (cells with a verdict) per verdict."""
        out = dict.fromkeys(VERDICTS, 0)
        for group in self.groups:
            for _, cells in group.rows:
                for cell in cells:
                    if cell.verdict in out:
                        out[cell.verdict] += 1
        return out


def as_claim(value: Claim | Mapping[str, Any]) -> Claim:
    """A Claim model from a Claim or its dict (``claims.json`` holds dicts)."""
    return value if isinstance(value, Claim) else Claim.model_validate(dict(value))


def claim_row(claim: Claim, key: str, label: str, sources: Mapping[str, str] | None = None) -> ClaimRow:
    """A claim's row; ``sources`` (paper key -> heading) names its paper in the source label."""
    source = claim.source
    return ClaimRow(key, label, claim.statement, source.group if source else UNDECLARED,
                    source.label(sources) if source else "", claim.condition(), claim.floor, claim.control)


def claim_cell(claim: Claim, n_seeds: int, href: str | None) -> Cell:
    """A run's cell: verdict, value, ``k/n`` when ``n_seeds`` > 1, title = the condition."""
    n = len(claim.per_seed) or n_seeds
    fraction = ""
    if n > 1 and claim.pass_fraction is not None:
        fraction = f"{round(claim.pass_fraction * n)}/{n}"
    title = "; ".join(t for t in (claim.condition(), claim.reason) if t)
    title = title or claim.evidence[:TITLE_CHARS]  # an undeclared claim: its evidence
    value = number(claim.value) if claim.value is not None else ""
    partial = claim.verdict == "fails" and bool(claim.pass_fraction)
    return Cell(str(claim.verdict), value, fraction, claim.reason, href, title, partial)


def _groups(rows: Mapping[str, ClaimRow], cells: Mapping[str, list[Cell]], sources: Mapping[str, str] | None,
            claims: Sequence[Claim]) -> tuple[Group, ...]:
    """The rows by source group, in :func:`~stagewise.report.claims.source_groups` order
    (headings from ``sources``, papers only ``claims`` cite under their key), undeclared last."""
    headings = {**source_groups(sources, (c.source for c in claims)), UNDECLARED: UNDECLARED_HEADING}
    out = []
    for group, heading in headings.items():
        members = tuple((row, tuple(cells[key])) for key, row in rows.items() if row.group == group)
        if members:
            out.append(Group(group, heading, members))
    return tuple(out)


@dataclass(frozen=True)
class RunClaims:
    """One column's input: the column, the run's claims, its number of seeds, the href of
    a claim's evidence (``evidence(claim_id)``) and the lab prefix of its row keys ("" on a
    one-lab page)."""

    column: Column
    claims: Sequence[Claim]
    n_seeds: int
    evidence: Callable[[str], str | None]
    lab: str = ""


def runs_matrix(runs: Sequence[RunClaims], sources: Mapping[str, str] | None = None) -> Matrix:
    """The matrix of runs' claims: a row per distinct (lab, claim id), in order of first
    appearance, its declaration from the first run that has it; ``sources``: paper key ->
    heading (the groups' headings and the papers' names in the source labels)."""
    rows: dict[str, ClaimRow] = {}
    found: dict[str, dict[int, Claim]] = {}
    for i, run in enumerate(runs):
        for claim in run.claims:
            key = f"{run.lab}/{claim.id}" if run.lab else claim.id
            if key not in rows:
                rows[key] = claim_row(claim, key, f"{run.lab} · {claim.id}" if run.lab else claim.id, sources)
                found[key] = {}
            found[key].setdefault(i, claim)
    cells = {key: [claim_cell(by_run[i], run.n_seeds, run.evidence(by_run[i].id)) if i in by_run else Cell(ABSENT)
                   for i, run in enumerate(runs)] for key, by_run in found.items()}
    return Matrix(tuple(r.column for r in runs), _groups(rows, cells, sources, [c for r in runs for c in r.claims]))


def _holds(value: Any) -> bool | None:
    """A collect-table claim cell as True / False / None."""
    value = _plain(value)
    if value is None or value is pd.NA or isinstance(value, str) and not value:
        return None
    if isinstance(value, str):
        return {"true": True, "holds": True, "yes": True, "false": False, "fails": False, "no": False}.get(value.lower())
    try:
        if pd.isna(value):
            return None
    except (TypeError, ValueError):
        return None
    return bool(value)


def _worst(values: list[float], claim: Claim | None) -> float:
    """The worst of a point's values by the claim's relation (the first when undeclared)."""
    if claim is None or claim.relation is None:
        return values[0]
    return min(values) if claim.relation in (">=", ">") else max(values)


def sweep_matrix(frame: pd.DataFrame, columns: Mapping[str, Column], claims: Mapping[str, Claim],
                 made: Mapping[str, frozenset[str]] | None = None, sources: Mapping[str, str] | None = None,
                 unconcerned: Mapping[str, Mapping[str, str]] | None = None) -> Matrix:
    """Claims x sweep points from the collect table (a row per run and seed; ``claim.ID``
    the run's verdict, ``claim_value.ID`` its value where collected). ``columns``: point
    label -> column (frame order is used for points missing there); ``claims``: id -> a
    run's Claim (its declaration; None fields for ids no summary declares).

    A cell holds when every testable row holds, else fails (``partial`` when some hold), is
    not testable when no row is (:data:`ABSENT` for a point whose run is not done); it
    shows the worst ``claim_value`` of the point when that column exists, else ``k/n``
    testable rows holding. ``made``: point label -> the ids of the claims its run's summary
    makes; a claim outside it is :data:`ABSENT` (the collect table's <NA> alone cannot tell
    a claim the run does not make from one it cannot test). ``sources``: paper key -> heading;
    ``unconcerned``: point label -> {claim id: reason} of the claims its run says are not
    applicable (their cell says so, with the reason)."""
    ids = [str(c)[len("claim."):] for c in frame.columns if str(c).startswith("claim.")]
    if not ids or "point" not in frame.columns:
        return Matrix((), ())
    groups = list(frame.groupby("point", sort=False))
    cols = tuple(columns.get(str(point)) or Column(str(point)) for point, _ in groups)
    rows: dict[str, ClaimRow] = {}
    cells: dict[str, list[Cell]] = {}
    for cid in ids:
        claim = claims.get(cid)
        rows[cid] = claim_row(claim, cid, cid, sources) if claim else ClaimRow(cid, cid, "", UNDECLARED)
        cells[cid] = []
        for col, (point, group) in zip(cols, groups):
            if made is not None and str(point) in made and cid not in made[str(point)]:
                cells[cid].append(Cell(ABSENT))
                continue
            reason = (unconcerned or {}).get(str(point), {}).get(cid)
            if reason is not None:
                cells[cid].append(Cell("not applicable", href=col.href, title=reason, reason=reason[:REASON_CHARS]))
                continue
            held = [_holds(v) for v in group[f"claim.{cid}"]]
            n_true, n_test = sum(h is True for h in held), sum(h is not None for h in held)
            condition = claim.condition() if claim else ""
            if not n_test:  # a point whose run did not finish has no verdict at all
                cells[cid].append(Cell(ABSENT) if col.failed else
                                  Cell("not testable", href=col.href, title=condition or "no testable seed"))
                continue
            value = ""
            if f"claim_value.{cid}" in frame.columns:
                finite = [float(v) for v in pd.to_numeric(group[f"claim_value.{cid}"], errors="coerce") if math.isfinite(v)]
                value = number(_worst(finite, claim)) if finite else ""
            fraction = "" if value else f"{n_true}/{n_test}"
            verdict = "holds" if n_true == n_test else "fails"
            cells[cid].append(Cell(verdict, value, fraction, href=col.href, title=condition,
                                   partial=verdict == "fails" and n_true > 0))
    return Matrix(cols, _groups(rows, cells, sources, list(claims.values())))


def markdown_cell(text: str) -> str:
    """Text safe inside a Markdown table cell: pipes escaped, line breaks as spaces."""
    return re.sub(r"\s*\n\s*", " ", str(text)).replace("|", "\\|")


def cell_text(cell: Cell) -> str:
    """``holds 0.9932 (4/4)`` / ``not testable (reason)`` / ``–`` (no such claim)."""
    if cell.verdict == ABSENT:
        return NONE_TEXT
    extra = " ".join(t for t in (cell.value, f"({cell.fraction})" if cell.fraction else "") if t)
    reason = f" ({cell.reason})" if cell.reason else ""
    return f"{cell.verdict}{' ' + extra if extra else ''}{reason}"


def matrix_markdown(matrix: Matrix) -> list[str]:
    """The matrix as Markdown lines: a table per source group."""
    lines: list[str] = []
    for group in matrix.groups:
        lines += [f"### {group.heading}", "",
                  "| claim | statement | condition | " + " | ".join(markdown_cell(c.label) for c in matrix.columns) + " |",
                  "|---|---|---|" + "---|" * len(matrix.columns)]
        for row, cells in group.rows:
            declared = "; ".join(t for t in (row.source, row.condition, f"floor: {row.floor}" if row.floor else "",
                                              f"control: {row.control}" if row.control else "") if t)
            lines.append(f"| {markdown_cell(row.label)} | {markdown_cell(row.statement)} | {markdown_cell(declared)} | "
                         + " | ".join(markdown_cell(cell_text(c)) for c in cells) + " |")
        lines.append("")
    return lines


def over_seeds_matrix(claims: Sequence[Claim], sources: Mapping[str, str] | None = None) -> Matrix:
    """The claims over seeds (:func:`stagewise.report.seedstats.judge_over_seeds`) as a matrix
    of one column: each claim's verdict against its controls, its judged value (the interval's
    end), ``k/n`` seeds passing alone."""
    if not claims:
        return Matrix((), ())
    n = max(len(c.per_seed) for c in claims) or 1
    return runs_matrix([RunClaims(Column(f"over seeds ({n})"), list(claims), n, lambda cid: None)], sources)


def over_seeds_lines(claims: Sequence[Claim]) -> list[str]:
    """One line per claim over seeds: id, verdict, evidence (the intervals and the controls)."""
    return [f"{c.id}: {c.verdict}" + (f" ({c.reason})" if c.reason else "") + (f"; {c.evidence}" if c.evidence else "")
            for c in claims]
