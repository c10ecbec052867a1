"""Claims at the command line: ``stagewise claims LAB`` (the declared :class:`ClaimSpec` s,
nothing run) and the claims table of ``stagewise show`` / the end of a run (verdicts).

Both group claims by their source, in :func:`~stagewise.report.claims.source_groups` order
(the papers, each under the heading its lab declares in ``Lab.sources``, then reviewers,
own checks); claims without a source (version-1 summaries, labs not yet declared) come
last under :data:`UNDECLARED`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable, List, Mapping, Optional, Sequence

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Column, Table

UNDECLARED = "undeclared (no source)"
"""Heading of the claims that carry no source."""

VERDICT_STYLE = {"holds": "green", "fails": "red", "inconclusive": "magenta", "not testable": "yellow", "not applicable": "dim"}
"""Colour of each verdict in the tables."""

out_console = Console()


def claim_groups(claims: Iterable[Any], sources: Mapping[str, str] | None = None) -> list[tuple[str, list[Any]]]:
    """``[(heading, claims)]`` in :func:`~stagewise.report.claims.source_groups` order (paper
    headings from ``sources``: key -> heading), then the claims without a source (``source``
    None) under :data:`UNDECLARED`; empty groups are left out, order within a group is kept.
    Works on :class:`ClaimSpec` and :class:`Claim` alike."""
    from .report.claims import source_groups

    claims = list(claims)
    headings = source_groups(sources, (c.source for c in claims))
    groups = [(heading, [c for c in claims if c.source is not None and c.source.group == group])
              for group, heading in headings.items()]
    groups.append((UNDECLARED, [c for c in claims if c.source is None or c.source.group not in headings]))
    return [(heading, members) for heading, members in groups if members]


def number_text(value: float | None) -> str:
    """A claim's value as the claims tables and ``show`` print it: 4 significant digits, None as "-"."""
    return "-" if value is None else f"{value:.4g}"


def print_verdicts(console: Console, claims: Sequence[Any], sources: Mapping[str, str] | None = None) -> None:
    """The tested claims of a summary: one table per source group (paper headings from
    ``sources``) with id, statement, verdict (holds / fails / not testable), value (the
    judged, worst seed's) and the reason or evidence."""
    for heading, members in claim_groups(claims, sources):
        width = max(len(c.id) for c in members) + 1  # the id (with its colon) is never cut: users copy it
        table = Table(Column("claim", min_width=width, overflow="fold"), Column("verdict", no_wrap=True),
                      Column("value", no_wrap=True), Column("evidence", overflow="fold"), title=escape(heading),
                      title_justify="left", header_style="bold")
        for claim in members:
            verdict = str(claim.verdict)
            detail = "; ".join(part for part in (f"reason: {claim.reason}" if claim.reason else "", claim.evidence) if part)
            table.add_row(escape(f"{claim.id}: {claim.statement}"), f"[{VERDICT_STYLE.get(verdict, 'white')}]{verdict}[/]",
                          number_text(claim.value), escape(detail))
        console.print(table)


def print_specs(console: Console, lab: str, specs: Sequence[Any], sources: Mapping[str, str] | None = None) -> None:
    """A lab's declared claims: one table per source group (paper headings and names from
    ``sources``, the lab's ``Lab.sources``) with id, source, statement, condition, floor
    and control."""
    if not specs:
        console.print(f"lab '{lab}' declares no claims yet", highlight=False, markup=False)
        return
    for heading, members in claim_groups(specs, sources):
        ids = Column("id", min_width=max(len(spec.id) for spec in members), no_wrap=True)  # never cut: users copy ids
        table = Table(ids, *(Column(name, overflow="fold") for name in ("source", "statement", "condition", "floor", "control")),
                      title=escape(heading), title_justify="left", header_style="bold")
        for spec in members:
            table.add_row(*(escape(text) for text in (spec.id, spec.source.label(sources), spec.statement, spec.condition(),
                                                      spec.floor or "-", spec.control)))
        console.print(table)


def claims_cmd(lab: str = typer.Argument(..., help="lab name, see `stagewise labs`"),
               as_json: bool = typer.Option(False, "--json", help="print the declared claims as a JSON list"),
               runs: Optional[List[Path]] = typer.Option(None, "--runs", help="finished run folders of LAB (a real run and "
                                                         "its controls, over seeds; e.g. tracked runs): judge the "
                                                         "claims over them, each by its declared aggregation across "
                                                         "the runs that differ only in seed and control; repeatable"),
               declare: Optional[Path] = typer.Option(None, "--declare", help="a YAML file of your own claims on the runs' "
                                                      "final metrics (report/ownclaims.py): judged over every seed of "
                                                      "--runs by the verdict engine")) -> None:
    """List LAB's declared claims and their sources (paper, theorem/figure, reviewer, own check); runs nothing."""
    from .labs import get_lab

    value = get_lab(lab)
    if declare is not None:
        from .errors import UserError
        from .report.ownclaims import judge, read_declarations

        declared = read_declarations(declare)  # one line, exit 2, before any run is read
        if not runs:
            raise UserError("--declare: give the finished runs to judge with --runs RUN (repeatable)")
        claims = judge(declared, [summary for _, _, summary in finished_lab_runs(value, runs)])
        if as_json:
            typer.echo(json.dumps([c.model_dump(mode="json") for c in claims], indent=2))
        else:
            print_verdicts(out_console, claims, value.sources)
        return
    if runs:
        claims = judge_runs(value, runs)
        if as_json:
            typer.echo(json.dumps([c.model_dump(mode="json") for c in claims], indent=2))
        elif not claims:
            out_console.print("no claim over seeds: the runs hold no real run with another seed or a control of it "
                              "(family: same config but seed and control)", highlight=False, markup=False)
        else:
            print_verdicts(out_console, claims, value.sources)
        return
    if as_json:
        typer.echo(json.dumps([spec.model_dump(mode="json") for spec in value.claims], indent=2))
        return
    print_specs(out_console, lab, value.claims, value.sources)


def finished_lab_runs(lab: Any, run_dirs: Sequence[Path]) -> list[tuple[str, Any, Any]]:
    """(lab name, config, summary) of the finished runs ``run_dirs``; one UserError line for a
    folder that is not a finished run of ``lab`` (nothing judged)."""
    from .errors import UserError
    from .orchestrate.overseeds import finished_runs
    from .runs import read_manifest

    for run_dir in run_dirs:
        manifest = read_manifest(run_dir)
        if manifest.get("lab") != lab.name or manifest.get("status") != "done":
            raise UserError(f"--runs {run_dir}: not a finished {lab.name} run (lab {manifest.get('lab')}, status "
                            f"{manifest.get('status')})")
    found = finished_runs(run_dirs)
    if len(found) != len(run_dirs):
        raise UserError(f"--runs: {len(run_dirs) - len(found)} of the runs have no readable summary or config")
    return found


def judge_runs(lab: Any, run_dirs: Sequence[Path]) -> list[Any]:
    """``lab.across_runs`` over the finished runs ``run_dirs`` (:func:`finished_lab_runs`); one
    UserError line for a lab without claims over runs."""
    from .errors import UserError

    if lab.across_runs is None:
        raise UserError(f"--runs: lab '{lab.name}' judges no claims across runs")
    return list(lab.across_runs([(config, summary) for _, config, summary in finished_lab_runs(lab, run_dirs)]))


def findings_cmd(folders: List[Path] = typer.Argument(..., help="finished run, sweep or reproduce folders, claims files "
                                                       "(results/) or phase map files"),
                 save: Optional[Path] = typer.Option(None, "--save", help="write one small claims file (JSON, no metrics) "
                                                     "per run read into this folder"),
                 markdown_out: Optional[Path] = typer.Option(None, "--markdown", help="write the findings page (markdown) here"),
                 command: Optional[str] = typer.Option(None, "--command", help="the command that reproduces the runs read "
                                                       "(default: from each folder: its run config, sweep or reproduce)"),
                 title: Optional[str] = typer.Option(None, "--title", help="the page's title (default: the findings page's)")) -> None:
    """One table of every claim the folders judged: verdict, value [interval] (n seeds), attainable bound, control, command."""
    from .orchestrate.findings import TITLE, collect, markdown, rows, save as save_records
    from .runs.atomic import atomic_write_text

    records = collect(folders, command)  # one line, exit 2, nothing written when a folder holds no claims
    if save is not None:
        for path in save_records(records, save):
            out_console.print(f"claims file: {path}", highlight=False, markup=False)
    if markdown_out is not None:
        markdown_out.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(markdown_out, markdown(records, title or TITLE))
        out_console.print(f"findings page: {markdown_out}", highlight=False, markup=False)
    if save is None and markdown_out is None:
        table = Table(*(Column(name, overflow="fold") for name in ("claim", "run", "verdict", "value [interval] (seeds)",
                                                                    "attainable bound", "control")),
                      title="Findings", title_justify="left", header_style="bold")
        for row in sorted(rows(records), key=lambda r: (r["order"], r["group"])):
            verdict = row["verdict"]
            table.add_row(escape(row["claim"]), escape(row["run"]), f"[{VERDICT_STYLE.get(verdict, 'white')}]{escape(verdict)}[/]",
                          escape(row["value"]), escape(row["bound"]), escape(row["control"]))
        out_console.print(table)
