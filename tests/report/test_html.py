"""`write_report`: self-contained HTML for a run, a sweep and a reproduce folder.

The browser tests open each page in headless Chromium (tests/browser.py) and check what a
reader sees: the title, every image decoded (complete, naturalWidth equal to the PNG's own
width), as many images as figures, a screenshot that is not blank. The other tests check
folder detection, escaping, the 'missing figure' note, and that every link leads to a file.
"""

from __future__ import annotations

import html
import importlib.util
import json
import re
import shutil
import struct
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from markupsafe import escape

from browser import BLANK_STD, MIN_COLOURS, SKIP_REASON, HeadlessChromium, find_browser
from runcache import NTP_SHORT
from stagewise.errors import UserError
from stagewise.labs import Reproduction, RunSpec, get_lab, spec_hash
from stagewise.measure import detect_stages
from stagewise.orchestrate import reproduce
from stagewise.orchestrate.reporting import folder_kind, reproduce_page, write_report
from stagewise.report.claims import Claim, ClaimSpec, own, paper, read_summary, reviewer
from stagewise.report.html import NONE_TEXT, SIGNIFICANT, number
from stagewise.report.matrix import UNDECLARED_HEADING
from stagewise.report.pages import stage_reports, stage_table

STEPS = NTP_SHORT  # example1, short: ~2 s a run here
SEEDS = (0, 1)
ATTRIBUTE = re.compile(r"""\b(src|href|action|srcset|poster)\s*=\s*(['"])(.*?)\2""", re.I | re.S)
UNQUOTED = re.compile(r"""\b(?:src|href|action|srcset|poster)\s*=\s*[^'"\s]""", re.I)
SCHEME = re.compile(r"\s*[a-z][a-z0-9+.-]*:", re.I)
EMBEDDED = "data:image/png;base64,"
HREF = re.compile(r"""href\s*=\s*['"]([^'"]*)['"]""")
CELL = re.compile(r"<td class='([a-z ]+)'(?: title='[^']*')?>(.*?)</td>", re.S)
"""A claims-matrix cell: its css classes (verdict first) and its content."""

TODAY_REPRODUCE_HEIGHT_PX = 13403
"""scrollHeight (1280 px window, tests/browser.py) of today's `stagewise reproduce ntp --quick` report.html,
measured before the claims matrix (every claim twice, every figure open); the same runs' page with the matrix
(rebuilt by `stagewise report` from the same run folders: 14 undeclared claims) measured 931 px, and a fresh
`reproduce ntp --quick` with the lab's declared claims (19 claims x 4 runs, a source line per row) 1690 px."""

MAX_REPRODUCE_HEIGHT_PX = 4000
"""The reproduce page of those runs must stay under this (today's 13403 px / 3.3): the matrix and four folded
run sections, with room for more declared claims."""


# ----------------------------------------------------------------------------- folders
def _png_width(path: Path) -> int:
    """Width from the PNG's IHDR chunk (bytes 16..20, big-endian)."""
    return struct.unpack(">I", Path(path).read_bytes()[16:20])[0]


@dataclass(frozen=True)
class Collected:
    """The interface of stagewise.orchestrate.collect.collect's result."""

    frame: pd.DataFrame
    figures: list[Path]
    warnings: list[str]


def stub_collect(figure_dir: Path):
    """A collect_fn with collect's interface: one row per point and seed from the run
    folders, and one figure drawn outside the sweep folder (so the report must copy it)."""

    def collect(folder: Path) -> Collected:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        index = json.loads((folder / "sweep.json").read_text())
        rows = []
        for p in index["points"]:
            run_dir = folder / p["run_dir"]
            manifest = json.loads((run_dir / "manifest.json").read_text())
            summary = read_summary(run_dir / "summary.json") if (run_dir / "summary.json").is_file() else None
            for seed in p.get("seeds", manifest["seeds"]):
                row = {"point": p["label"], "hash": p["hash"], "run_dir": p["run_dir"], "status": manifest["status"],
                       "error": manifest.get("error"), "seed": seed, **p["values"]}
                if summary is not None:
                    row.update({f"final.{k}": v for k, v in summary.per_seed[str(seed)].items()
                                if isinstance(v, (int, float))})
                    row.update({f"claim.{c.id}": c.holds for c in summary.claims})
                rows.append(row)
        frame = pd.DataFrame(rows)
        figure_dir.mkdir(parents=True, exist_ok=True)
        fig, ax = plt.subplots(figsize=(4, 3))
        ax.plot(frame["seed"], frame.get("final.loss", frame["seed"]), "o-")
        png = figure_dir / "loss_vs_seed.png"
        fig.savefig(png)
        fig.savefig(png.with_suffix(".pdf"))
        plt.close(fig)
        return Collected(frame, [png], [])

    return collect


def real_or_stub_collect(figure_dir: Path):
    """The project's collect once it exists, else the stub (same interface)."""
    if importlib.util.find_spec("stagewise.orchestrate.collect") is not None:
        from stagewise.orchestrate.collect import collect

        return collect
    return stub_collect(figure_dir)


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory, run_cache) -> Path:
    """A sweep folder over seed in {0, 1} (NTP example1, short), laid out as `stagewise
    sweep` writes it: sweep.json and the run folders by config hash; the two points are
    folded into one batched run of both seeds (each point names its seeds)."""
    out = tmp_path_factory.mktemp("report") / "sweep"
    spec = RunSpec(lab="ntp", preset="example1", overrides={**STEPS, "seed": SEEDS[0], "n_seeds": len(SEEDS)})
    run_dir = f"runs/{spec_hash(spec)}"
    run_cache.copy(spec, out / run_dir)
    points = [{"label": f"seed={s}", "values": {"seed": s}, "hash": spec_hash(RunSpec(lab="ntp", preset="example1",
               overrides={**STEPS, "seed": s})), "run_dir": run_dir, "seeds": [s]} for s in SEEDS]
    (out / "sweep.json").write_text(json.dumps({"lab": "ntp", "axes": ["seed"], "points": points}))
    return out


@pytest.fixture(scope="module")
def run_dir(sweep_dir, tmp_path_factory) -> Path:
    """A copy of the sweep's first run folder (a plain run directory)."""
    first = json.loads((sweep_dir / "sweep.json").read_text())["points"][0]["run_dir"]
    out = tmp_path_factory.mktemp("report") / "run"
    shutil.copytree(sweep_dir / first, out)
    return out


def _reproduce_lab(config: dict, names: tuple[str, ...]):
    specs = tuple(RunSpec(lab="ntp", overrides=config, name=n) for n in names)
    return replace(get_lab("ntp"), reproduce=Reproduction(full=specs, quick=specs))


@pytest.fixture(scope="module")
def reproduce_dir(run_dir, tmp_path_factory) -> Path:
    """A reproduce folder made by `reproduce` (runs a and b: the finished run above, so
    nothing trains again)."""
    import yaml

    out = tmp_path_factory.mktemp("report") / "reproduce"
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    lab = _reproduce_lab(config, ("a", "b"))
    for name in ("a", "b"):
        shutil.copytree(run_dir, out / "runs" / name, ignore=shutil.ignore_patterns("report.html"))
    plan = {"lab": "ntp", "quick": True, "specs": [json.loads(s.to_json()) for s in lab.reproduce.specs(True)]}
    (out / "reproduce.json").write_text(json.dumps(plan))  # as reproduce writes it first
    report = reproduce(lab, out, quick=True)
    assert [r["status"] for r in report["runs"]] == ["done", "done"]
    return out



def test_cli_and_page_count_claim_checks_alike(reproduce_dir):
    """Issue 26: `reproduce` prints "k of n claim checks hold" (a claim judged in one run), the
    same n and per-verdict numbers the page, its matrix and claims.md give; no "k/n claims"."""
    from stagewise.cli_sweep import claim_checks_line
    from stagewise.report.html import reproduce_markdown, reproduce_matrix

    report = json.loads((reproduce_dir / "claims.json").read_text())
    verdicts = [c["verdict"] for r in report["runs"] for c in r["claims"]]
    matrix = reproduce_matrix(report)
    assert matrix.n_checks == len(verdicts) == sum(matrix.counts().values())
    assert matrix.n_claims < matrix.n_checks  # two runs: each claim is checked twice
    line = claim_checks_line(report)
    assert f"{verdicts.count('holds')} of {matrix.n_checks} claim checks hold" in line
    assert (f"{verdicts.count('not testable')} not testable" in line) == ("not testable" in verdicts)
    assert "claims hold" not in line
    assert f"{matrix.n_checks} claim checks: holds {verdicts.count('holds')}" in reproduce_markdown(report)


@pytest.fixture(scope="module")
def chromium():
    found = find_browser()
    if found is None:
        pytest.skip(SKIP_REASON)
    pytest.importorskip("selenium", reason="selenium not installed: pip install -e '.[test]'")
    browser = HeadlessChromium(found)
    yield browser
    browser.close()


# ------------------------------------------------------------------------------ checks
def _self_contained(text: str) -> None:
    """No resource or link leaves the file: images are embedded PNGs, links relative hrefs."""
    for attr, _, value in ATTRIBUTE.findall(text):
        if attr.lower() == "src":
            assert value.startswith(EMBEDDED), value[:40]
        else:
            assert not SCHEME.match(value) and not value.startswith("//"), value
    assert not UNQUOTED.search(text)
    lower = text.lower()
    assert all(tag not in lower for tag in ("<script", "<link", "<iframe", "<object", "<embed", "url(", "@import"))


def _title(text: str) -> str:
    return html.unescape(re.search(r"<title>(.*?)</title>", text, re.S).group(1))


def _check_rendered(browser: HeadlessChromium, result) -> None:
    text = result.html.read_text()
    _self_contained(text)
    rendered = browser.render(result.html)
    assert rendered.title == _title(text)
    assert len(rendered.images) == len(result.figures) > 0
    assert all(complete for complete, _ in rendered.images)
    assert [w for _, w in rendered.images] == [_png_width(p) for p in result.figures]  # decoded, not broken
    assert rendered.pixel_std > BLANK_STD and rendered.colours >= MIN_COLOURS


def _links_resolve(page: Path) -> list[str]:
    """Every relative href of ``page``; asserts each names an existing file (anchors: an id)."""
    text = page.read_text()
    hrefs = HREF.findall(html.unescape(text))
    for href in hrefs:
        if href.startswith("#"):
            assert f"id='{href[1:]}'" in text, href
        else:
            assert (page.parent / href).is_file(), href
    return hrefs


# ------------------------------------------------------------------------ browser tests
def test_run_report_renders_in_chromium(chromium, run_dir):
    result = write_report(run_dir)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert result.kind == "run" and result.html == run_dir / "report.html"
    assert list(result.figures) == sorted((run_dir / "figures").glob("*.png"))  # referenced where they are
    assert not (run_dir / "report" / "figures").exists()
    assert manifest["lab"] in _title(result.html.read_text()) and manifest["status"] in _title(result.html.read_text())
    _check_rendered(chromium, result)


def test_blank_page_is_seen_as_blank(chromium, tmp_path):
    """The detector the render checks rely on: an empty page is blank, a report is not."""
    empty = tmp_path / "empty.html"
    empty.write_text("<!doctype html><title>empty</title>")
    rendered = chromium.render(empty)
    assert rendered.blank and rendered.colours == 1 and rendered.images == ()


def test_sweep_report_renders_in_chromium(chromium, sweep_dir, tmp_path):
    result = write_report(sweep_dir, collect_fn=real_or_stub_collect(tmp_path / "figs"))
    assert result.kind == "sweep"
    _check_rendered(chromium, result)


def test_reproduce_report_renders_in_chromium(chromium, reproduce_dir):
    result = write_report(reproduce_dir)
    assert result.kind == "reproduce"
    _check_rendered(chromium, result)


def test_long_reproduce_page_is_shorter_than_today(chromium, tmp_path):
    """The ntp lab's quick reproduction (the runs of today's measured page): matrix first,
    runs folded, so the page is a fraction of today's height."""
    from stagewise.orchestrate.executors import ExecutorOptions

    folder = tmp_path / "ntp-quick"
    report = reproduce(get_lab("ntp"), folder, quick=True, opts=ExecutorOptions(max_parallel=1))
    assert len(report["runs"]) == 4 and all(r["status"] == "done" for r in report["runs"])
    result = write_report(folder)
    _check_rendered(chromium, result)
    height = chromium.render(result.html).height
    assert 0 < height < MAX_REPRODUCE_HEIGHT_PX < TODAY_REPRODUCE_HEIGHT_PX, height


# ---------------------------------------------------------------------- detection tests
@pytest.mark.parametrize("make", ["missing", "empty", "file", "manifest only"])
def test_folder_that_is_no_report_folder_is_one_line_error(tmp_path, make):
    target = tmp_path / "x"
    if make == "empty":
        target.mkdir()
    elif make == "file":
        target.write_text("not a folder")
    elif make == "manifest only":
        target.mkdir()
        (target / "manifest.json").write_text("{}")
    with pytest.raises(UserError) as err:
        write_report(target)
    assert len(err.value.messages) == 1 and str(target) in err.value.messages[0]
    assert not (target / "report.html").exists()


def test_folder_kinds(run_dir, sweep_dir, reproduce_dir):
    assert [folder_kind(d) for d in (run_dir, sweep_dir, reproduce_dir)] == ["run", "sweep", "reproduce"]


# ----------------------------------------------------------------------- content tests
def _copy_run(run_dir: Path, to: Path) -> Path:
    shutil.copytree(run_dir, to, ignore=shutil.ignore_patterns("report.html"))
    return to


def test_text_is_escaped(run_dir, tmp_path):
    run = _copy_run(run_dir, tmp_path / "run")
    summary = json.loads((run / "summary.json").read_text())
    summary["claims"][0]["evidence"] = "<script>alert(1)</script> & 'q'"
    (run / "summary.json").write_text(json.dumps(summary))
    manifest = json.loads((run / "manifest.json").read_text())
    (run / "manifest.json").write_text(json.dumps({**manifest, "status": "failed", "error": "ValueError: <b>x</b>"}))
    text = write_report(run).html.read_text()
    assert "<script>" not in text and "<b>x</b>" not in text
    assert str(escape("<script>alert(1)</script> & 'q'")) in text
    assert "ValueError: &lt;b&gt;x&lt;/b&gt;" in text


def test_unreadable_figure_is_a_visible_note(run_dir, tmp_path):
    run = _copy_run(run_dir, tmp_path / "run")
    (run / "figures" / "broken.png").write_bytes(b"not a png")
    good = sorted(p for p in (run / "figures").glob("*.png") if p.name != "broken.png")
    result = write_report(run)
    assert result.missing == ("broken",)
    assert list(result.figures) == good
    text = result.html.read_text()
    assert "missing figure broken" in text and text.count("<img ") == len(good)


def test_sweep_links_every_point_and_marks_failures(sweep_dir, tmp_path):
    sweep = tmp_path / "sweep"
    shutil.copytree(sweep_dir, sweep)
    index = json.loads((sweep / "sweep.json").read_text())
    failed = {"label": "seed=2", "values": {"seed": 2}, "hash": "f" * 16, "run_dir": "runs/" + "f" * 16}
    shutil.copytree(sweep / index["points"][0]["run_dir"], sweep / failed["run_dir"])
    (sweep / failed["run_dir"] / "summary.json").unlink()
    manifest = json.loads((sweep / failed["run_dir"] / "manifest.json").read_text())
    (sweep / failed["run_dir"] / "manifest.json").write_text(json.dumps(
        {**manifest, "seeds": [2], "status": "failed", "error": "RuntimeError: <boom>"}))
    index["points"].append(failed)
    (sweep / "sweep.json").write_text(json.dumps(index))
    result = write_report(sweep, collect_fn=stub_collect(tmp_path / "outside"))
    # the figure drawn outside the folder is copied next to the page, with its PDF
    copied = sweep / "report" / "figures" / "loss_vs_seed.png"
    assert result.figures == (copied,) and copied.with_suffix(".pdf").is_file()
    hrefs = _links_resolve(result.html)
    assert {f"{p['run_dir']}/report.html" for p in index["points"]} <= set(hrefs)
    assert "report/figures/loss_vs_seed.pdf" in hrefs
    assert sorted(result.run_reports) == sorted({sweep / p["run_dir"] / "report.html" for p in index["points"]})
    for page in result.run_reports:  # each run page links back to the sweep page
        assert "../../report.html" in _links_resolve(page)
    text = result.html.read_text()
    assert "RuntimeError: &lt;boom&gt;" in text and "<boom>" not in text
    failed_rows = re.findall(r"<tr class='failed'>(.*?)</tr>", text)
    assert failed_rows and all("seed=2" in row for row in failed_rows)
    assert not any(f"seed={s}<" in row for row in failed_rows for s in SEEDS)
    rows = _matrix_rows(text)
    assert rows and all(cells[-1][0] == "absent" for cells in rows.values())  # the failed point: no verdict, not "not testable"


def _matrix_rows(text: str) -> dict[str, list[tuple[str, str]]]:
    """Claim label -> its matrix cells (css, content), from the page's claims matrix."""
    matrix = text.split("<table class='matrix'>")[1].split("</table>")[0]
    rows = {}
    for label, cells in re.findall(r"<tr><th class='claim'[^>]*><b>(.*?)</b>.*?</th>(.*?)</tr>", matrix, re.S):
        rows[html.unescape(label)] = CELL.findall(cells)
    return rows


def test_sweep_claims_matrix_counts_seeds(sweep_dir, tmp_path):
    collect = stub_collect(tmp_path / "figs")
    frame = collect(sweep_dir).frame
    text = write_report(sweep_dir, collect_fn=lambda folder: Collected(frame, [], [])).html.read_text()
    rows = _matrix_rows(text)
    claims = [c for c in frame.columns if c.startswith("claim.")]
    assert sorted(rows) == sorted(c[len("claim."):] for c in claims)  # a row per claim, once
    points = list(frame.groupby("point", sort=False))
    for col in claims:
        cells = rows[col[len("claim."):]]
        assert len(cells) == len(points)
        for (css, shown), (_, group) in zip(cells, points):
            held = group[col].dropna().astype(bool)
            if held.empty:
                assert css.split()[0] == "nottestable"
            else:
                assert css.split()[0] == ("holds" if held.all() else "fails")
                assert f"({int(held.sum())}/{len(held)})" in shown
    collected = text.split("<details id='collected'>")[1]
    assert "claim." not in collected  # each claim's verdicts are in the matrix only


def test_sweep_matrix_shows_claim_values_where_collected(sweep_dir, tmp_path):
    frame = stub_collect(tmp_path / "figs")(sweep_dir).frame
    first = next(c for c in frame.columns if c.startswith("claim."))
    cid = first[len("claim."):]
    values = np.linspace(0.25, 0.75, len(frame))
    frame[f"claim_value.{cid}"] = values
    text = write_report(sweep_dir, collect_fn=lambda folder: Collected(frame, [], [])).html.read_text()
    cells = _matrix_rows(text)[cid]
    for (_, shown), (_, group) in zip(cells, frame.groupby("point", sort=False)):
        shown_values = {number(v) for v in group[f"claim_value.{cid}"]}
        assert any(f"<span class='num'>{v}</span>" in shown for v in shown_values)
        assert "<small>(" not in shown  # the value, not k/n


HEADINGS = {"paper1": "paper 1: First Author, 2001 (one)", "paper2": "paper 2: Second Author, 2002 (two)"}
"""The papers of :func:`_declared_claims`, as a summary names them (``sources``)."""


def _declared_claims() -> list:
    """Claims of every source kind, out of report order, and one undeclared (version-1) claim."""
    base = {"quantity": "min cos", "relation": ">=", "threshold": 0.99, "control": "random init"}
    p1 = ClaimSpec(id="p1_claim", statement="stage one learns p", source=paper("paper1", "Theorem 1"), over="run", **base)
    p2 = ClaimSpec(id="p2_claim", statement="direction converges", source=paper("paper2", "Theorem 3"), floor="1 - 1e-9", **base)
    rv = ClaimSpec(id="rv_claim", statement="late rate", source=reviewer("review: Lemma 5"), **base)
    ow = ClaimSpec(id="own_claim", statement="our check", source=own("Example 1"), **base)
    old = Claim(id="old_claim", statement="a version-1 claim", holds=True, evidence="old evidence")
    return [ow.result({"0": 0.5, "1": 0.995}, "own evidence"), old,
            p2.result({"0": 0.995, "1": 0.9991}, "p2 evidence"), rv.not_testable("horizon too short", "rv evidence"),
            p1.result(0.999, "p1 evidence")]


def test_run_page_groups_declared_claims_by_source(run_dir, tmp_path):
    run = _copy_run(run_dir, tmp_path / "run")
    summary = json.loads((run / "summary.json").read_text())
    claims = _declared_claims()
    summary["claims"] = [c.model_dump(mode="json") for c in claims]
    summary["sources"] = HEADINGS
    (run / "summary.json").write_text(json.dumps(summary))
    text = write_report(run).html.read_text()
    headings = [html.unescape(h) for h in re.findall(r"<th class='group'[^>]*>(.*?)</th>", text)]
    assert headings == [HEADINGS["paper1"], HEADINGS["paper2"], "reviewers", "own checks", UNDECLARED_HEADING]
    assert "paper 1, Theorem 1" in text and "paper 2, Theorem 3" in text  # a paper's short name in its claims' labels
    rows = _matrix_rows(text)
    assert list(rows) == ["p1_claim", "p2_claim", "rv_claim", "own_claim", "old_claim"]  # report order
    by_id = {c.id: c for c in claims}
    for cid, cells in rows.items():
        (css, shown), = cells  # one column: this run
        c = by_id[cid]
        assert css.split()[0] == {"holds": "holds", "fails": "fails", "not testable": "nottestable"}[c.verdict]
        assert f">{c.verdict}</a>" in shown and f"href='#ev-{cid}'" in shown
        assert f"id='ev-{cid}'" in text  # the evidence the cell links to
        if c.value is not None:
            assert f"<span class='num'>{number(c.value)}</span>" in shown
        if len(c.per_seed) > 1:
            assert f"({round(c.pass_fraction * len(c.per_seed))}/{len(c.per_seed)})" in shown
    assert "horizon too short" in rows["rv_claim"][0][1]  # the reason a claim is not testable, in its cell
    assert "(1/2)" in rows["own_claim"][0][1] and "partial" in rows["own_claim"][0][0]
    for c in claims:  # the declaration once per claim; the condition is the cell's hover text
        assert text.count(str(escape(c.statement))) == 1
        if c.condition():
            assert f"title='{escape(c.condition())}" in text
    assert text.count("<td>random init</td>") == 4 and text.count("<td>1 - 1e-9</td>") == 1  # floors and controls: one table


def test_run_page_of_a_summary_from_before_paper_keys_takes_the_labs_headings(run_dir, tmp_path):
    """An older summary (source kind ``paper2``, no ``sources``) groups its paper's claims under
    the heading the run's lab declares today, and the page is the one its summary rewritten in
    the new form gives."""
    run = _copy_run(run_dir, tmp_path / "run")
    summary = json.loads((run / "summary.json").read_text())
    summary.pop("sources", None)
    for claim in summary["claims"]:
        if claim["source"]["kind"] == "paper":
            claim["source"] = {"kind": claim["source"].pop("paper"), "where": claim["source"]["where"]}
    assert any(c["source"]["kind"] == "paper2" for c in summary["claims"])
    (run / "summary.json").write_text(json.dumps(summary))
    old = write_report(run).html.read_text()
    headings = [html.unescape(h) for h in re.findall(r"<th class='group'[^>]*>(.*?)</th>", old)]
    assert headings[0] == get_lab("ntp").sources["paper2"]
    new = read_summary(run / "summary.json").model_copy(update={"sources": dict(get_lab("ntp").sources)})
    (run / "summary.json").write_text(json.dumps(new.to_json()))
    assert write_report(run).html.read_text() == old


def test_reproduce_page_lists_each_claim_once_and_links_runs(reproduce_dir, tmp_path):
    folder = tmp_path / "rep"
    shutil.copytree(reproduce_dir, folder)
    report = json.loads((folder / "claims.json").read_text())
    result = reproduce_page(report, folder)
    text = result.html.read_text()
    ids = list(dict.fromkeys(c["id"] for r in report["runs"] for c in r["claims"]))
    rows = _matrix_rows(text)
    assert sorted(rows) == sorted(ids) and all(len(cells) == len(report["runs"]) for cells in rows.values())
    for r in report["runs"]:
        for c in r["claims"]:
            assert text.count(str(escape(c["statement"]))) == 1  # printed once, not once per run
    verdicts = [c["verdict"] for r in report["runs"] for c in r["claims"]]
    counts = text.split("<h2>Claims</h2>")[0]
    assert f"{len(ids)} claims over {len(report['runs'])} runs, {len(verdicts)} claim checks:" in counts
    for word in ("holds", "fails", "not testable"):
        assert f"{word}: {verdicts.count(word)}" in counts
    assert not any(word in text for word in (">held<", ">yes<", ">untestable<", "did not hold"))  # one vocabulary
    hrefs = _links_resolve(result.html)
    assert {"runs/a/report.html", "runs/b/report.html", "#run-a", "#run-b"} <= set(hrefs)
    assert {f"#ev-{name}-{cid}" for name in ("a", "b") for cid in ids} <= set(hrefs)  # each cell links its evidence
    assert text.count("<details id='run-") == len(report["runs"])  # per-run details folded below
    assert len(result.figures) == sum(len(r["figures"]) for r in report["runs"])
    markdown = (folder / "claims.md").read_text()
    assert all(markdown.count(f"| {cid} |") == 1 + len(report["runs"]) for cid in ids)  # matrix row + each run's evidence
    assert "untestable" not in markdown and "| yes |" not in markdown
    # an interrupted reproduce (no claims.json yet) is rebuilt from its plan and run folders
    (folder / "claims.json").unlink()
    rebuilt = write_report(folder)
    assert rebuilt.html.read_text().count("<tr") == text.count("<tr")


def test_reproduce_page_over_labs_keeps_each_labs_claims_apart(reproduce_dir, tmp_path):
    report = json.loads((reproduce_dir / "claims.json").read_text())
    runs = [{**run, "name": f"{lab}/{run['name']}", "run_dir": f"{lab}/{run['run_dir']}", "figures": []}
            for lab in ("ntp", "other") for run in report["runs"]]
    folder = tmp_path / "all"
    folder.mkdir()
    text = reproduce_page({"lab": "all", "quick": True, "runs": runs}, folder).html.read_text()
    ids = list(dict.fromkeys(c["id"] for c in report["runs"][0]["claims"]))
    rows = _matrix_rows(text)
    assert sorted(rows) == sorted(f"{lab} · {cid}" for lab in ("ntp", "other") for cid in ids)
    for cells in rows.values():  # each lab's row has cells in its own runs' columns only
        assert sum(css != "absent" for css, _ in cells) == len(report["runs"])


def test_stage_reports_are_found_at_any_depth():
    steps = np.arange(0, 50, 5)
    rows = [{"step": int(t), "seed": s, "metric": m, "value": float(t >= c)}
            for s, shift in ((0, 0), (1, 10)) for m, c in (("a", 10 + shift), ("b", 30 + shift)) for t in steps]
    report = detect_stages(pd.DataFrame(rows), {"A": ("a", 0.5, "above"), "B": ("b", 0.5, "above")}).as_dict()
    details = {"x": 1, "group": {"runs": [{"stages": "no"}, report]}}
    found = list(stage_reports(details))
    assert [where for where, _ in found] == ["group.runs.1"]
    rendered = stage_table(found[0][1])
    assert rendered.index(">A<") < rendered.index(">B<")  # in the report's order
    assert f">{number(report['stages']['B']['mean'])}<" in rendered and "2/2" in rendered


@pytest.mark.parametrize("value", [0.123456789, 123456.789, -2.5e-7, 1.0, 3.0, 98765.4321])
def test_numbers_keep_four_significant_digits(value):
    shown = number(value)
    assert abs(float(shown) - value) <= 0.5 * 10 ** (np.floor(np.log10(abs(value))) - SIGNIFICANT + 1) * (1 + 1e-12)
    assert len(shown.split("e")[0].replace("-", "").replace(".", "").lstrip("0")) <= SIGNIFICANT
    assert number(np.float32(value)) == f"{float(np.float32(value)):.{SIGNIFICANT}g}"


def test_missing_values_and_flags():
    assert [number(v) for v in (None, float("nan"), np.nan, pd.NA, True, np.int64(7))] == \
        [NONE_TEXT, NONE_TEXT, NONE_TEXT, NONE_TEXT, "yes", "7"]


def test_run_without_summary_still_gets_a_page(run_dir, tmp_path):
    run = _copy_run(run_dir, tmp_path / "run")
    (run / "summary.json").unlink()
    text = write_report(run).html.read_text()
    assert "no summary.json (the run did not finish)" in text and "<h2>Claims</h2>" not in text
    assert "<details id='manifest'>" in text and "<details id='config'>" in text


def test_sweep_point_outside_its_folder_is_not_written(sweep_dir, tmp_path):
    sweep, elsewhere = tmp_path / "sweep", tmp_path / "elsewhere"
    shutil.copytree(sweep_dir, sweep)
    first = json.loads((sweep / "sweep.json").read_text())["points"][0]
    shutil.copytree(sweep / first["run_dir"], elsewhere, ignore=shutil.ignore_patterns("report.html"))
    index = {"lab": "ntp", "points": [{**first, "run_dir": "../elsewhere"}]}
    (sweep / "sweep.json").write_text(json.dumps(index))
    result = write_report(sweep, collect_fn=lambda folder: Collected(pd.DataFrame(), [], []))
    assert not (elsewhere / "report.html").exists() and result.run_reports == ()
    assert any("outside" in w for w in result.warnings)


def test_point_lines_give_one_short_axis_line_per_value(sweep_dir, tmp_path):
    """A sweep point's matrix header: one line per axis, the last dotted name, in full where
    two axes share it; values written as in the point's label and kept whole (a comma inside
    a value stays); no axes, no lines (the header shows the label). The page shows the
    lines, with the full label on hover."""
    from stagewise.orchestrate.sweepplan import point_label, point_lines

    values = {"train.reproduce_original_padding": True, "train.lr": 1e-05}
    assert point_lines(values) == ("reproduce_original_padding=True", "lr=1e-05")
    assert point_label(values) == ",".join(("train." + line for line in point_lines(values)))
    assert point_lines({"model.lr": 0.1, "train.lr": 0.01}) == ("model.lr=0.1", "train.lr=0.01")
    assert point_lines({"data.sizes": [1, 2], "seed": 3}) == ("sizes=[1, 2]", "seed=3")
    assert point_lines({}) == ()
    sweep = tmp_path / "sweep"
    shutil.copytree(sweep_dir, sweep)
    index = json.loads((sweep / "sweep.json").read_text())
    for p in index["points"]:
        p["values"] = {"train.seed": p["values"]["seed"]}
    (sweep / "sweep.json").write_text(json.dumps(index))
    text = write_report(sweep, collect_fn=stub_collect(tmp_path / "figs")).html.read_text()
    header = text.split("<table class='matrix'>")[1].split("</tr>")[0]
    assert all(f"title='{p['label']}'" in header for p in index["points"])
    assert all(f">seed={p['values']['train.seed']}</a>" in header for p in index["points"])


def test_sweep_matrix_shows_a_claim_a_run_does_not_make_as_absent(sweep_dir, tmp_path):
    """Two runs, the second's summary without one claim and with another not testable: the
    first is absent in its column (the collect table's <NA> alone would read "not testable"),
    the second stays "not testable"."""
    sweep = tmp_path / "sweep"
    shutil.copytree(sweep_dir, sweep)
    index = json.loads((sweep / "sweep.json").read_text())
    first = index["points"][0]["run_dir"]
    second = "runs/" + "e" * 16
    shutil.copytree(sweep / first, sweep / second)
    summary = json.loads((sweep / second / "summary.json").read_text())
    dropped, untestable = summary["claims"][0]["id"], summary["claims"][1]["id"]
    summary["claims"] = summary["claims"][1:]
    summary["claims"][0].update(holds=None, verdict="not testable", value=None, per_seed={}, reason="made untestable here")
    (sweep / second / "summary.json").write_text(json.dumps(summary))
    index["points"][1]["run_dir"] = second
    (sweep / "sweep.json").write_text(json.dumps(index))
    rows = _matrix_rows(write_report(sweep, collect_fn=stub_collect(tmp_path / "figs")).html.read_text())
    assert rows[dropped][0][0].split()[0] in ("holds", "fails") and rows[dropped][1][0] == "absent"
    assert rows[untestable][1][0].split()[0] == "nottestable"
