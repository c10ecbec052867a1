"""Findings as data: ``stagewise findings DIR...`` (issue 38).

One table from report folders: every claim the runs judged (both papers' claims, the reviewers'
objections the project tests, its own checks), with its verdict, value [interval] (n seeds),
the attainable bound, the verdict of its control and the command that reproduces it.

What a folder (or file) is, checked in this order::

    *.json with "kind": "stagewise.claims/1"   a claims file (what --save writes; results/)
    *.json with "kind": "stagewise.phase-map/1" a phase map's claims (examples/gate_noise_phase_map.py --claims)
    reproduce.json                             a reproduce folder: each run's claims and the claims over seeds
    sweep.json                                 a sweep folder: over_seeds.json, and each finished run's claims
                                               that are not judged over seeds there
    manifest.json + config.yaml                a run folder (its claims once it has a summary)
    (the three as ``stagewise report`` reads them: :func:`.reporting.folder_kind`)
    a folder holding claims files              each of them, subfolders included (a results folder)

A claims file is the small, committable record of one run (or one sweep's claims over seeds):
the lab, the label, the command that reproduces it, the seeds, the papers' headings and the
claims as the engine judged them; no metrics. ``--save DIR`` writes one per input; ``--markdown
FILE`` the page (docs/findings.md is generated this way from results/, and a test regenerates
it and compares); a claims file's ``notes.figures`` (paths from the repository root) are shown
on the page after the tables.

Control verdicts: a claim's declared ``control`` that names another claim of the same file by
its id (e.g. ``gn_control_not_learned``) shows that claim's verdict; a claim whose controls the
engine decided with it (paired claims, ``Claim.control_verdicts``) shows those.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from ..errors import UserError, read_json_object
from ..report.claims import Claim
from .reporting import folder_kind

CLAIMS_KIND = "stagewise.claims/1"
PHASE_MAP_KIND = "stagewise.phase-map/1"
PAPER_ORDER = ("paper1", "paper2")
"""Papers first, in this order; then reviewers' objections, then own checks."""
TITLE = "Findings: what stagewise measured about the two papers"
"""The page's title (docs/findings.md)."""
GROUP_TITLES = {"reviewer": "Review objections the project tests", "own": "The project's own checks"}


@dataclass(frozen=True)
class ClaimsFile:
    """The claims of one run (or one sweep's or reproduce's claims over seeds)."""

    label: str
    lab: str
    command: str
    seeds: list[int]
    sources: dict[str, str]
    claims: list[Claim]
    origin: str = ""  # the folder or file it was read from
    notes: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"kind": CLAIMS_KIND, "label": self.label, "lab": self.lab, "command": self.command, "seeds": self.seeds,
                "sources": self.sources, "notes": self.notes, "claims": [c.model_dump(mode="json") for c in self.claims]}


@dataclass(frozen=True)
class PhaseMap:
    """A phase map's points, each with its criteria claims (examples/gate_noise_phase_map.py --claims)."""

    label: str
    command: str
    points: list[dict[str, Any]]
    origin: str = ""
    lab: str = ""


def _claims(items: Iterable[Any], where: str) -> list[Claim]:
    out = []
    for i, item in enumerate(items):
        try:
            out.append(item if isinstance(item, Claim) else Claim.model_validate(item))
        except Exception as err:  # pydantic's error, one line
            raise UserError(f"{where}: claim {i} is not a claim ({str(err).splitlines()[0]})") from None
    return out


def _run_command(run_dir: Path, manifest: Mapping[str, Any]) -> str:
    command = manifest.get("command")
    if isinstance(command, str) and command:
        return command
    return f"stagewise run {manifest.get('lab', 'LAB')} --config {run_dir / 'config.yaml'}"


def read_run(run_dir: Path, label: str | None = None, command: str | None = None) -> ClaimsFile | None:
    """A finished run folder's claims (None when it has no summary)."""
    from ..report.claims import read_summary
    from ..runs import read_manifest

    manifest = read_manifest(run_dir)
    summary_path = run_dir / "summary.json"
    if not summary_path.exists():
        return None
    summary = read_summary(summary_path)
    return ClaimsFile(label or run_dir.name, str(manifest.get("lab") or summary.lab), command or _run_command(run_dir, manifest),
                      [int(s) for s in summary.seeds], dict(summary.sources), list(summary.claims), str(run_dir))


def read_file(path: Path) -> list[ClaimsFile | PhaseMap]:
    """A claims file or a phase map file."""
    data = read_json_object(path, "claims file")
    kind = data.get("kind")
    if kind == CLAIMS_KIND:
        return [ClaimsFile(str(data.get("label") or path.stem), str(data.get("lab", "")), str(data.get("command", "")),
                           [int(s) for s in data.get("seeds", [])], dict(data.get("sources") or {}),
                           _claims(data.get("claims") or [], str(path)), str(path), dict(data.get("notes") or {}))]
    if kind == PHASE_MAP_KIND:
        return [PhaseMap(str(data.get("label") or path.stem), str(data.get("command", "")), list(data.get("points") or []),
                         str(path), str(data.get("lab", "")))]
    raise UserError(f"{path}: not a claims file (its \"kind\" is {kind!r}; allowed: {CLAIMS_KIND}, {PHASE_MAP_KIND})")


def read_folder(path: str | Path, command: str | None = None) -> list[ClaimsFile | PhaseMap]:
    """Every claims record in ``path`` (the kinds of the module docstring); [] when it holds none."""
    path = Path(path)
    if not path.exists():
        raise UserError(f"{path}: no such file or folder")
    if path.is_file():
        return read_file(path)
    try:
        kind = folder_kind(path)  # the report's own reading of a folder
    except UserError:
        kind = ""  # a folder of claims files (results/)
    if kind == "reproduce":
        return _read_reproduce(path, command)
    if kind == "sweep":
        return _read_sweep(path, command)
    if kind == "run":
        found = read_run(path, command=command)
        return [found] if found is not None else []
    out: list[ClaimsFile | PhaseMap] = []
    for child in sorted(path.rglob("*.json")):  # a results folder: its claims files, subfolders included
        try:
            kind = json.loads(child.read_text()).get("kind")
        except (OSError, ValueError, AttributeError):
            continue
        if kind in (CLAIMS_KIND, PHASE_MAP_KIND):
            out += read_file(child)
    return out


def _read_sweep(folder: Path, command: str | None) -> list[ClaimsFile | PhaseMap]:
    index = read_json_object(folder / "sweep.json", "sweep index")
    lab = str(index.get("lab", ""))
    cmd = command or f"stagewise sweep SPEC --out {folder}"
    out: list[ClaimsFile | PhaseMap] = []
    for point in index.get("points") or []:
        run_dir = folder / str(point.get("run_dir", ""))
        if (run_dir / "summary.json").exists():
            found = read_run(run_dir, label=f"{folder.name}: {point.get('label', run_dir.name)}", command=cmd)
            if found is not None:
                out.append(found)
    over = folder / "over_seeds.json"
    if over.exists():
        data = read_json_object(over, "claims over seeds")
        sources = next((f.sources for f in out if isinstance(f, ClaimsFile)), {})
        seeds = sorted({s for f in out if isinstance(f, ClaimsFile) for s in f.seeds})
        pooled = _claims(data.get("claims") or [], str(over))
        # a claim judged over seeds is read there (its per-seed values included), not once per run
        judged = {c.spec_id for c in pooled}
        out = [kept for f in out if isinstance(f, ClaimsFile)
               for kept in [replace(f, claims=[c for c in f.claims if c.spec_id not in judged])] if kept.claims]
        out.append(ClaimsFile(f"{folder.name}: over seeds", lab, cmd, seeds, sources, pooled, str(over)))
    return out


def _read_reproduce(folder: Path, command: str | None) -> list[ClaimsFile | PhaseMap]:
    claims_path = folder / "claims.json"
    if not claims_path.exists():
        return []
    report = read_json_object(claims_path, "reproduce report")
    lab = str(report.get("lab", ""))
    cmd = command or f"stagewise reproduce {lab}" + (" --quick" if report.get("quick") else "")
    sources = dict(report.get("sources") or {})
    out: list[ClaimsFile | PhaseMap] = []
    for run in report.get("runs") or []:
        claims = _claims(run.get("claims") or [], f"{claims_path} run {run.get('name')}")
        if claims:
            out.append(ClaimsFile(f"{folder.name}: {run.get('name')}", str(run.get("lab", lab)), cmd,
                                  [int(s) for s in run.get("seeds") or []], sources, claims, str(claims_path)))
    if report.get("over_seeds"):
        out.append(ClaimsFile(f"{folder.name}: over seeds", lab, cmd, [], sources,
                              _claims(report["over_seeds"], str(claims_path)), str(claims_path)))
    return out


def collect(paths: Sequence[str | Path], command: str | None = None) -> list[ClaimsFile | PhaseMap]:
    """Every claims record under ``paths``; one UserError line (nothing written) when a path
    holds none."""
    out: list[ClaimsFile | PhaseMap] = []
    for path in paths:
        found = read_folder(path, command)
        if not found or not any(isinstance(f, PhaseMap) or f.claims for f in found):
            raise UserError(f"{path}: holds no claims (allowed: a finished run, sweep or reproduce folder, a claims file "
                            f"({CLAIMS_KIND}), a phase map file ({PHASE_MAP_KIND}) or a folder of them)")
        out += found
    return out


# --- the table ----------------------------------------------------------------------------------------------------------
def _num(value: float | None, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return f"{value:.{digits}g}"


def value_text(claim: Claim) -> str:
    """value [interval] (n seeds): the deciding value, the engine's interval where one decided, the seeds measured."""
    n = sum(v is not None for v in claim.per_seed.values())
    low, high = claim.interval or (None, None)
    iv = f" [{'-inf' if low is None else _num(low)}, {'inf' if high is None else _num(high)}]" if claim.interval else ""
    seeds = f" ({n} seed{'s' if n != 1 else ''})" if n else ""
    return f"{_num(claim.value)}{iv}{seeds}"


def _group(claim: Claim) -> tuple[int, str]:
    """(order, key): papers first (PAPER_ORDER), then reviewers, own checks, undeclared."""
    src = claim.source
    if src is None:
        return (9, "undeclared")
    if src.kind == "paper":
        key = str(getattr(src, "paper", ""))
        return (PAPER_ORDER.index(key) if key in PAPER_ORDER else len(PAPER_ORDER), key)
    return ((5 if src.kind == "reviewer" else 6), str(src.kind))


_ID = re.compile(r"[A-Za-z0-9_]+")


def control_verdicts(claim: Claim, by_id: Mapping[str, Claim]) -> str:
    """The control's verdict: the claims named by id in the declared control, else the engine's arms."""
    named = [word for word in _ID.findall(claim.control) if word in by_id and word != claim.id]
    if named:
        return "; ".join(f"{name}: {by_id[name].verdict}" for name in dict.fromkeys(named))
    arms = claim.control_verdicts
    return "; ".join(f"{name}: {word}" for name, word in arms.items()) or "-"


def rows(records: Sequence[ClaimsFile | PhaseMap]) -> list[dict[str, Any]]:
    """One row per claim per claims file (phase maps: one row per criterion, over the map's points)."""
    out: list[dict[str, Any]] = []
    sources = {k: v for rec in records if isinstance(rec, ClaimsFile) for k, v in rec.sources.items()}
    for rec in records:
        if isinstance(rec, PhaseMap):
            out += _phase_rows(rec, sources)
            continue
        by_id = {c.id: c for c in rec.claims}
        for claim in rec.claims:
            order, key = _group(claim)
            heading = rec.sources.get(key) or GROUP_TITLES.get(key) or key
            out.append({"order": order, "group": heading, "run": rec.label, "lab": rec.lab, "claim": claim.id, "phase_map": False,
                        "statement": claim.statement, "verdict": str(claim.verdict), "value": value_text(claim),
                        "bound": claim.floor or "-", "control": control_verdicts(claim, by_id), "command": rec.command,
                        "reason": claim.reason})
    return out


def _phase_rows(rec: PhaseMap, sources: Mapping[str, str]) -> list[dict[str, Any]]:
    """Per criterion of a phase map: at how many points it holds, and each other verdict's count
    (``sources``: paper key -> heading, from the other records read with it)."""
    counts: dict[str, dict[str, int]] = {}
    first: dict[str, Claim] = {}
    for point in rec.points:
        for item in point.get("claims") or []:
            claim = item if isinstance(item, Claim) else Claim.model_validate(item)
            first.setdefault(claim.id, claim)
            counts.setdefault(claim.id, {})
            counts[claim.id][str(claim.verdict)] = counts[claim.id].get(str(claim.verdict), 0) + 1
    out = []
    n = len(rec.points)
    for cid, words in counts.items():
        claim = first[cid]
        order, key = _group(claim)
        text = ", ".join(f"{w} at {k} of {n} points" for w, k in sorted(words.items(), key=lambda kv: -kv[1]))
        out.append({"order": order, "group": sources.get(key) or GROUP_TITLES.get(key) or key, "run": rec.label,
                    "lab": rec.lab, "claim": cid, "phase_map": True,
                    "statement": claim.statement, "verdict": text, "value": f"{n} points", "bound": claim.floor or "-",
                    "control": "-", "command": rec.command, "reason": ""})
    return out


def glance(table: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str], str]:
    """(group, claim id) -> its verdicts over the rows, e.g. "holds 3, not testable 1" (phase maps: their text)."""
    counts: dict[tuple[str, str], dict[str, int]] = {}
    texts: dict[tuple[str, str], str] = {}
    for row in table:
        key = (str(row["group"]), str(row["claim"]))
        if row["phase_map"]:  # a phase map's row already counts its points
            texts[key] = f"{row['run']}: {row['verdict']}"
            continue
        counts.setdefault(key, {})
        counts[key][row["verdict"]] = counts[key].get(row["verdict"], 0) + 1
    out = {}
    for key in dict.fromkeys([(str(r["group"]), str(r["claim"])) for r in table]):
        parts = [f"{w} in {k} run{'s' if k != 1 else ''}" for w, k in sorted(counts.get(key, {}).items(), key=lambda kv: (-kv[1], kv[0]))]
        out[key] = "; ".join(p for p in (", ".join(parts), texts.get(key, "")) if p)
    return out


def markdown(records: Sequence[ClaimsFile | PhaseMap], title: str = TITLE) -> str:
    """The findings page: one table per group (papers first), every claim of every record."""
    table = sorted(rows(records), key=lambda r: (r["order"], r["group"]))
    lines = [f"# {title}", "",
             "Generated by `stagewise findings` from the claims files listed at the end; do not edit by hand "
             "(a test regenerates this page and compares). Verdicts are the verdict engine's "
             "(`src/stagewise/report/verdicts.py`): holds, fails, inconclusive (the numbers cannot decide), "
             "not testable (the threshold is beyond what the model attains, or the values cannot carry a verdict), "
             "not applicable.", ""]
    esc = lambda s: str(s).replace("|", "\\|").replace("\n", " ")  # noqa: E731
    lines += ["## At a glance", "", "Each claim's verdicts over the runs that judged it (the tables below give every run).", "",
              "| group | claim | verdicts over the runs |", "|---|---|---|"]
    for (group_name, claim_id), words in glance(table).items():
        lines.append(f"| {esc(group_name.split(': ', 1)[0])} | `{claim_id}` | {esc(words)} |")
    group = None
    for row in table:
        if row["group"] != group:
            group = row["group"]
            lines += ["", f"## {group}", "", "| claim | run | verdict | value [interval] (seeds) | attainable bound | control | reason |",
                      "|---|---|---|---|---|---|---|"]
        lines.append(f"| `{row['claim']}`: {esc(row['statement'])} | {esc(row['run'])} | **{esc(row['verdict'])}** | "
                     f"{esc(row['value'])} | {esc(row['bound'])} | {esc(row['control'])} | {esc(row['reason']) or '-'} |")
    shown = [(rec.label, str(f)) for rec in records if isinstance(rec, ClaimsFile) for f in rec.notes.get("figures") or []]
    if shown:  # a claims file's figures (notes.figures: paths from the repository root), as the page in docs/ links them
        lines += ["", "## Figures", ""]
        for label, figure in dict.fromkeys(shown):
            link = figure[len("docs/"):] if figure.startswith("docs/") else figure if Path(figure).is_absolute() else f"../{figure}"
            lines += [f"![{esc(label)}: {esc(Path(figure).stem)}]({link})", ""]
        lines.pop()
    lines += ["", "## Reproduce", "", "| run | lab | seeds | command | claims file |", "|---|---|---|---|---|"]
    for rec in records:
        if isinstance(rec, PhaseMap):
            lines.append(f"| {esc(rec.label)} | disentangled | {len(rec.points)} points | `{esc(rec.command)}` | {esc(rec.origin)} |")
        else:
            seeds = "-" if not rec.seeds else str(rec.seeds[0]) if len(rec.seeds) == 1 else f"{min(rec.seeds)}-{max(rec.seeds)}"
            lines.append(f"| {esc(rec.label)} | {rec.lab} | {seeds} | `{esc(rec.command)}` | {esc(rec.origin)} |")
    return "\n".join(lines) + "\n"


def save(records: Sequence[ClaimsFile | PhaseMap], out: Path) -> list[Path]:
    """One claims file per record under ``out`` (``LABEL.claims.json``; phase maps as they are)."""
    from ..runs.atomic import atomic_write_json

    out.mkdir(parents=True, exist_ok=True)
    written = []
    for rec in records:
        name = re.sub(r"[^A-Za-z0-9_.-]+", "-", rec.label).strip("-") or "claims"
        if isinstance(rec, PhaseMap):
            path = out / f"{name}.phase-map.json"
            atomic_write_json(path, {"kind": PHASE_MAP_KIND, "label": rec.label, "command": rec.command, "points": rec.points})
        else:
            path = out / f"{name}.claims.json"
            atomic_write_json(path, rec.to_json())
        written.append(path)
    return written
