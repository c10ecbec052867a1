"""`stagewise show RUN [--long]` and the summary at the end of `stagewise run`: a run's status,
its scalars, the tables its lab declares, its final values and one line per claim (id,
verdict, value, k/n seeds passing), every line within the terminal's width (80 columns in a
pipe or a notebook) and nothing cut inside a word, a number or brackets. ``--long`` adds under
each claim its statement, condition, reason, evidence, per-seed values, interval and the
controls' verdicts, and prints the tables' texts whole."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import typer
from rich.cells import cell_len
from rich.console import Console
from rich.markup import escape
from rich.table import Column, Table
from rich.text import Text

from .cli_claims import VERDICT_STYLE, claim_groups, number_text
from .cli_text import gist, line_width, pack, wrap

if TYPE_CHECKING:
    from .labs.contract import Lab

INDENT = "  "
"""Before each claim's line, under its source's heading."""
DETAIL = "      "
"""Before each --long line under a claim."""
TABLE_TEXT = 40
"""Columns a text cell of a lab's table gets without --long (its gist; the whole with --long)."""
LONG_HINT = "(stagewise show --long RUN: each claim's reason and evidence, texts whole)"


def show_cmd(run_dir: Path = typer.Argument(..., help="a run directory"),
             long: bool = typer.Option(False, "--long", help="each claim's statement, condition, reason, evidence, "
                                       "per-seed values, interval and controls; tables' texts whole")) -> None:
    """Print a run's status, final values and claims, one line each (--long: the evidence)."""
    print_summary(run_dir, long)


def registered_lab(name: Any) -> Lab | None:
    """The lab registered as ``name``; None for a lab this installation does not have."""
    from .labs import REGISTRY

    return REGISTRY[name] if isinstance(name, str) and name in REGISTRY else None


def print_summary(run_dir: Path, long: bool = False) -> None:
    """The run's status line, notes, scalars, the lab's tables, final values and claims at
    the output's width; one UserError line for a folder that is not a run or holds a
    symbolic link (never followed: a summary.json linked to a file outside is not read, as
    ``report`` and ``load_run`` refuse it)."""
    from .report.claims import read_summary
    from .runs import read_manifest
    from .runs.links import refuse_links
    from .runs.names import rename_keys

    refuse_links(run_dir)
    manifest = read_manifest(run_dir)
    summary_path = Path(run_dir) / "summary.json"
    width = line_width()
    console = Console(width=width, highlight=False)
    head = pack([str(run_dir), f"lab={manifest['lab']}", f"status={manifest['status']}", f"seeds={manifest['seeds']}",
                 f"config={manifest['config_hash']}"], width)
    _print(console, head, bold=len(str(run_dir)))
    if manifest.get("error"):
        _print(console, wrap(f"error: {manifest['error']}", width, indent=INDENT))
    for key, value in (manifest.get("notes") or {}).items():  # facts a lab recorded (e.g. dropped examples)
        _print(console, wrap(f"{key}: {value}", width, indent=INDENT))
    if not summary_path.exists():
        return
    summary = read_summary(summary_path)
    scalars = {k: v for k, v in summary.details.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    _print(console, pack([f"{k}={v:.6g}" if isinstance(v, float) else f"{k}={v}" for k, v in scalars.items()], width))
    lab = registered_lab(manifest["lab"])
    cut = False
    for render in (lab.summary_tables.values() if lab else ()):  # the tables the lab shows from its summary
        extra = render(summary)
        if extra is not None:
            rows = [[_cell(v) for v in row] for row in extra.rows]
            shown = rows if long else [[gist(c, TABLE_TEXT) if " " in c else c for c in row] for row in rows]
            cut = cut or shown != rows
            _print(console, fitted_table(extra.columns, shown, width))
    if summary.final:
        fmt = lambda v: "-" if v is None else f"{v:.6g}"  # noqa: E731
        finals = rename_keys(summary.final, lab.metric_aliases if lab else {})  # an old run: current names
        _print(console, fitted_table(("metric (last step)", "mean", "min", "max"),
                                     [[name, fmt(s.mean), fmt(s.min), fmt(s.max)] for name, s in finals.items()], width))
    if summary.claims:
        counts = ", ".join(f"{n} {word}" for word, n in summary.counts().items() if n)
        _print(console, wrap(f"claims: {len(summary.claims)} ({counts})", width))
        _print(console, claim_lines(summary.claims, {**(lab.sources if lab else {}), **summary.sources}, width, long))
    if not long and (summary.claims or cut):
        _print(console, wrap(LONG_HINT, width))


def _cell(value: Any) -> str:
    """A lab table's value as text: a float to 4 significant digits, None as "-"."""
    return f"{value:.4g}" if isinstance(value, float) else "-" if value is None else str(value)


def _print(console: Console, lines: Sequence[Text | str] | Table, bold: int = 0) -> None:
    """Lines as they are (no markup, no wrapping, no cropping; the first ``bold`` characters of
    the first line in bold), or a table."""
    if isinstance(lines, Table):
        console.print(lines)
        return
    for i, line in enumerate(lines):
        text = line if isinstance(line, Text) else Text(line)
        if bold and i == 0:
            text.stylize("bold", 0, bold)
        console.print(text, soft_wrap=True)


def seeds_text(claim: Any) -> str:
    """``k/n seeds pass`` for a claim judged on n > 1 seeds (``n seeds`` without a pass
    fraction), "" for one seed or a claim on the run as a whole."""
    n = len(claim.per_seed)
    if n < 2:
        return ""
    return f"{n} seeds" if claim.pass_fraction is None else f"{round(claim.pass_fraction * n)}/{n} seeds pass"


def claim_lines(claims: Sequence[Any], sources: Mapping[str, str] | None, width: int, long: bool = False) -> list[Text]:
    """One line per claim under its source's heading: id, verdict (in its colour), value (the
    judged, worst seed's, 4 significant digits) and :func:`seeds_text`, in aligned columns
    within ``width`` (an id too long for its line puts the rest on the next one, never cut).
    ``long``: each claim's :func:`evidence_lines` under it, a blank line between claims."""
    if not claims:
        return []
    verdict_w = max(len(str(c.verdict)) for c in claims)
    value_w = max(len(number_text(c.value)) for c in claims)
    seeds_w = max(len(seeds_text(c)) for c in claims)
    tail_w = 2 + verdict_w + 2 + value_w + (2 + seeds_w if seeds_w else 0)
    pad = max(0, min(max(len(c.id) for c in claims), width - len(INDENT) - tail_w))
    out: list[Text] = []
    for heading, members in claim_groups(claims, sources):
        out += [Text(line) for line in wrap(heading, width)]
        for claim in members:
            verdict, seeds = str(claim.verdict), seeds_text(claim)
            tail = Text.assemble(("  " + f"{verdict:<{verdict_w}}", VERDICT_STYLE.get(verdict, "")),
                                 f"  {number_text(claim.value):>{value_w}}" + (f"  {seeds}" if seeds else ""))
            if len(claim.id) > pad:  # the id alone, the rest below it
                out += [Text(INDENT + claim.id), Text(INDENT + " " * pad) + tail]
            else:
                out.append(Text(INDENT + f"{claim.id:<{pad}}") + tail)
            out[-1].rstrip()
            if long:
                out += [Text(line) for line in evidence_lines(claim, width)] + [Text("")]
    return out[:-1] if long else out


def evidence_lines(claim: Any, width: int) -> list[str]:
    """What a claim rests on, a labelled paragraph each, wrapped at spaces within ``width``:
    statement, condition, floor, control, reason, evidence, per-seed values, the interval that
    decided (its coverage, the sign test's p) and the controls' verdicts."""
    per_seed = ", ".join(f"{seed}: {number_text(v)}" for seed, v in claim.per_seed.items()) if len(claim.per_seed) > 1 else ""
    interval = ""
    if claim.interval is not None:
        low, high = claim.interval
        interval = f"[{'-inf' if low is None else number_text(low)}, {'inf' if high is None else number_text(high)}]"
        interval += f", coverage {claim.coverage:.3g}" if claim.coverage is not None else ""
    if claim.sign_p is not None:
        interval += ("; " if interval else "") + f"sign test p = {claim.sign_p:.3g}"
    controls = "; ".join(f"{name}: {word}" for name, word in claim.control_verdicts.items())
    parts = [("", claim.statement), ("condition", claim.condition()), ("floor", claim.floor), ("control", claim.control),
             ("reason", claim.reason), ("evidence", claim.evidence), ("per seed", per_seed),
             ("median's interval" if claim.interval is not None else "over seeds", interval), ("controls judged", controls)]
    return [line for label, text in parts if text
            for line in wrap(text, width, DETAIL + (f"{label}: " if label else ""), DETAIL + "  ")]


def fitted_table(columns: Sequence[str], rows: Sequence[Sequence[str]], width: int) -> Table | list[str]:
    """A table of texts within ``width`` columns, no word or number cut: as given where it fits
    (texts wrap at spaces), else transposed (a row per column), else as lines: the first
    column's head, then per row its label and its ``column: value`` items packed."""
    layouts = [(list(columns), [list(r) for r in rows])]
    if rows:
        layouts.append(([columns[0], *(r[0] for r in rows)], [[head, *(r[i] for r in rows)] for i, head in
                                                               enumerate(columns) if i]))
    for heads, body in layouts:
        widths = column_widths(heads, body, width)
        if widths is not None:
            table = Table(*(Column(escape(h), width=w) for h, w in zip(heads, widths)), header_style="bold")
            for cells in body:
                table.add_row(*(escape(c) for c in cells))  # texts are plain: "[...]" is not markup
            return table
    lines = wrap(columns[0], width)
    for row in rows:
        lines += wrap(row[0], width, INDENT, INDENT)
        lines += pack([f"{h}: {c}" if h else c for h, c in zip(columns[1:], row[1:])], width, indent=2 * INDENT)
    return lines


def column_widths(heads: Sequence[str], body: Sequence[Sequence[str]], width: int) -> list[int] | None:
    """Widths of the columns of a rich table of ``heads`` and ``body`` (padding and borders
    aside) within ``width`` columns: each as wide as its longest text where all fit, else
    each at least its longest word and the columns left over shared in proportion to what
    each lacks; None where the longest words alone do not fit."""
    cols = [[h, *(r[i] for r in body)] for i, h in enumerate(heads)]
    most = [max((cell_len(line) for text in col for line in text.splitlines()), default=0) for col in cols]
    least = [max((cell_len(w) for text in col for w in text.split()), default=0) for col in cols]
    room = width - (3 * len(heads) + 1) - sum(least)  # a rich table: 2 of padding and 1 of border a column, 1 border
    if room < 0:
        return None
    lack = [m - w for m, w in zip(most, least)]
    if sum(lack) <= room:
        return most
    widths = [w + room * d // sum(lack) for w, d in zip(least, lack)]
    for i in sorted(range(len(widths)), key=lambda i: widths[i] - most[i]):  # the columns left by rounding
        if sum(widths) < width - (3 * len(heads) + 1) and widths[i] < most[i]:
            widths[i] += 1
    return widths
