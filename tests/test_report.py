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

from browser import BLANK_STD, MIN_COLOURS, SKIP_REASON, HeadlessChromium, find_browser
from stagewise.errors import UserError
from stagewise.labs import Reproduction, RunSpec, get_lab
from stagewise.measure import detect_stages
from stagewise.orchestrate import reproduce
from stagewise.orchestrate.reporting import folder_kind, reproduce_page, write_report
from stagewise.orchestrate.runner import execute_spec
from stagewise.report.claims import read_summary
from stagewise.report.html import NONE_TEXT, SIGNIFICANT, number
from stagewise.report.pages import stage_reports, stage_table

STEPS = {"train": {"steps_stage1": 20, "steps_stage2": 20}}  # example1, short: ~2 s a run here
SEEDS = (0, 1)
ATTRIBUTE = re.compile(r"""\b(src|href|action|srcset|poster)\s*=\s*(['"])(.*?)\2""", re.I | re.S)
UNQUOTED = re.compile(r"""\b(?:src|href|action|srcset|poster)\s*=\s*[^'"\s]""", re.I)
SCHEME = re.compile(r"\s*[a-z][a-z0-9+.-]*:", re.I)
EMBEDDED = "data:image/png;base64,"
HREF = re.compile(r"""href\s*=\s*['"]([^'"]*)['"]""")


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
def sweep_dir(tmp_path_factory) -> Path:
    """A sweep folder over seed in {0, 1} (NTP example1, short), laid out as `stagewise
    sweep` writes it: sweep.json and the run folders by config hash; the two points are
    folded into one batched run of both seeds (each point names its seeds)."""
    out = tmp_path_factory.mktemp("report") / "sweep"
    spec = RunSpec(lab="ntp", preset="example1", overrides={**STEPS, "seed": SEEDS[0], "n_seeds": len(SEEDS)})
    run_dir = f"runs/{spec.hash}"
    assert execute_spec(spec, out / run_dir)["status"] == "done"
    points = [{"label": f"seed={s}", "values": {"seed": s}, "hash": RunSpec(lab="ntp", preset="example1",
               overrides={**STEPS, "seed": s}).hash, "run_dir": run_dir, "seeds": [s]} for s in SEEDS]
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
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &amp; &#x27;q&#x27;" in text
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


def test_sweep_claims_matrix_counts_seeds(sweep_dir, tmp_path):
    collect = stub_collect(tmp_path / "figs")
    frame = collect(sweep_dir).frame
    text = write_report(sweep_dir, collect_fn=lambda folder: Collected(frame, [], [])).html.read_text()
    matrix = text.split("Claims (fraction of seeds holding)")[1].split("<h2>")[0]
    for point, group in frame.groupby("point", sort=False):
        row = re.search(rf"<tr><td><a[^>]*>{re.escape(point)}</a></td>(.*?)</tr>", matrix).group(1)
        cells = re.findall(r"<td class='([a-z]+)[^']*'>([^<]*)</td>", row)
        claims = [c for c in frame.columns if c.startswith("claim.")]
        assert len(cells) == len(claims)
        for (css, shown), col in zip(cells, claims):
            held = group[col].dropna().astype(bool)
            if held.empty:
                assert css == "untestable"
            else:
                assert shown.endswith(f"({int(held.sum())}/{len(held)})")


def test_reproduce_page_lists_every_claim_first_and_links_runs(reproduce_dir, tmp_path):
    folder = tmp_path / "rep"
    shutil.copytree(reproduce_dir, folder)
    report = json.loads((folder / "claims.json").read_text())
    result = reproduce_page(report, folder)
    text = result.html.read_text()
    first = text.split("<h2>Every claim</h2>")[1].split("<h2 ")[0]
    total = sum(len(r["claims"]) for r in report["runs"])
    assert first.count("<tr>") - 1 == total  # header row + one row per claim of every run
    assert f"{total} claims over {len(report['runs'])} runs" in first
    held = sum(c["holds"] is True for r in report["runs"] for c in r["claims"])
    assert f"held: {held}" in first
    hrefs = _links_resolve(result.html)
    assert {"runs/a/report.html", "runs/b/report.html", "#run-a", "#run-b"} <= set(hrefs)
    assert len(result.figures) == sum(len(r["figures"]) for r in report["runs"])
    # an interrupted reproduce (no claims.json yet) is rebuilt from its plan and run folders
    (folder / "claims.json").unlink()
    rebuilt = write_report(folder)
    assert rebuilt.html.read_text().count("<tr>") == text.count("<tr>")


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
    assert "<h2>Manifest</h2>" in text


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
