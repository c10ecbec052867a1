"""Reports built from untrusted JSON: no link that leaves the report's folder or runs
script, no figure embedded from outside the folder.

A sweep.json ``run_dir``, a claims.json run's ``run_dir`` and figure names are whatever
the file says. Every ``<a href>`` of every written page is read with html.parser (as a
browser would: attribute entities decoded) and must be an in-page anchor or a relative path
to a file inside the report's folder; every embedded image must be the bytes of a file
inside the folder.
"""

from __future__ import annotations

import base64
import html
import json
import posixpath
import shutil
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pandas as pd
import pytest

from runcache import EXAMPLE1_SHORT
from stagewise.orchestrate.reporting import write_report
from stagewise.report.html import safe_href

EMBEDDED = "data:image/png;base64,"

HOSTILE = ("javascript:alert(document.domain)", "JaVaScRiPt:alert(1)", " javascript:alert(2)",
           "data:text/html,<script>alert(1)</script>", "//evil.example/x", "/etc/passwd", "../../x", "a/../../b",
           "runs\\..\\..\\x", "java\tscript:alert(3)")
"""run_dir / figure values a crafted file may hold."""


# ------------------------------------------------------------------------------ reading
class _Tags(HTMLParser):
    """Every href of an <a> and every src of an <img>, entities decoded; every tag and
    attribute name."""

    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []
        self.srcs: list[str] = []
        self.tags: list[str] = []
        self.attributes: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attributes += [name for name, _ in attrs]
        attrs = dict(attrs)
        if tag == "a" and "href" in attrs:
            self.hrefs.append(attrs["href"])
        if tag == "img" and "src" in attrs:
            self.srcs.append(attrs["src"])


def _tags(page: Path) -> _Tags:
    parser = _Tags()
    parser.feed(page.read_text(encoding="utf-8"))
    return parser


def _assert_links_stay_inside(page: Path, root: Path) -> list[str]:
    """Every href of ``page``: an in-page ``#id``, or a relative path (no scheme, no host,
    no leading '/', no backslash) naming an existing file inside ``root``."""
    hrefs = _tags(page).hrefs
    text = page.read_text(encoding="utf-8")
    for href in hrefs:
        if href.startswith("#"):
            assert f"id='{href[1:]}'" in text, href
            continue
        parts = urlsplit(href)
        assert not parts.scheme and not parts.netloc and not parts.query and not parts.fragment, href
        assert not href.startswith("/") and "\\" not in href and href == href.strip(), href
        target = Path(posixpath.normpath(posixpath.join(page.parent.as_posix(), unquote(href))))
        assert target.resolve().is_relative_to(root.resolve()), href
        assert target.is_file(), href
    return hrefs


# ----------------------------------------------------------------------------- folders
@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, run_cache) -> Path:
    return _copy_run(run_cache.path(EXAMPLE1_SHORT), tmp_path_factory.mktemp("safety") / "run")


def _copy_run(run_dir: Path, to: Path) -> Path:
    shutil.copytree(run_dir, to, ignore=shutil.ignore_patterns("report.html"))
    return to


def _lexically_inside(value: str) -> bool:
    """Whether a crafted path names a place inside the folder (then the test creates it)."""
    return "\\" not in value and not value.startswith("/") and not posixpath.normpath(value).startswith("..")


@dataclass(frozen=True)
class Collected:
    frame: pd.DataFrame
    figures: list[Path]
    warnings: list[str]


def _sweep(run_dir: Path, folder: Path, run_dirs: list[str]) -> Path:
    """A sweep folder whose points name ``run_dirs``; a copy of the run sits at each one
    that lies inside the folder (so a page is written there and linked)."""
    manifest = json.loads((run_dir / "manifest.json").read_text())
    points = []
    for i, key in enumerate(run_dirs):
        if _lexically_inside(key):
            _copy_run(run_dir, folder / key)
        points.append({"label": f"p{i}", "values": {"seed": i}, "hash": f"{i:016x}", "run_dir": key})
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sweep.json").write_text(json.dumps({"lab": "ntp", "axes": ["seed"], "points": points}))
    assert manifest["status"] == "done"
    return folder


def _frame(folder: Path) -> pd.DataFrame:
    """The collect table of the sweep: one row per point (point, hash, run_dir, status), and
    one claim column, a claim the good run's summary makes (the matrix shows a claim a run
    does not make as absent, without a link)."""
    points = json.loads((folder / "sweep.json").read_text())["points"]
    claim = json.loads((folder / "runs" / "good" / "summary.json").read_text())["claims"][0]["id"]
    return pd.DataFrame([{"point": p["label"], "hash": p["hash"], "run_dir": p["run_dir"], "status": "done",
                          "seed": 0, "final.loss": 0.5, f"claim.{claim}": True} for p in points])


# ------------------------------------------------------------------------------ tests
@pytest.mark.parametrize("value,up,expected", [
    ("runs/a/report.html", 0, "runs/a/report.html"),
    ("runs/a b/#x?.html", 0, "runs/a%20b/%23x%3F.html"),
    ("./runs//a/../b/report.html", 0, "runs/b/report.html"),
    ("figures/x:y.pdf", 0, "figures/x%3Ay.pdf"),
    ("#run-a", 0, "#run-a"),
    ("../report.html", 1, "../report.html"),
    ("../../../report.html", 3, "../../../report.html"),
    ("../report.html", 0, None),
    ("../../report.html", 1, None),
    ("a/../../b", 0, None),
    ("a/..", 0, None),
    ("javascript:alert(1)", 0, None),
    ("JaVaScRiPt:alert(1)/report.html", 0, None),
    ("x/../javascript:alert(1)", 0, None),
    (" javascript:alert(1)", 0, None),
    ("data:text/html,x", 0, None),
    ("//evil.example/x", 0, None),
    ("/etc/passwd", 0, None),
    ("runs\\..\\x", 0, None),
    ("java\nscript:x", 0, None),
    ("#x' onmouseover='alert(1)", 0, "%23x%27%20onmouseover%3D%27alert%281%29"),  # no anchor: a file name
    ("", 0, None),
    (None, 0, None),
])
def test_safe_href_allows_only_relative_paths_inside_the_folder(value, up, expected):
    assert safe_href(value, up=up) == expected


def test_sweep_report_links_no_hostile_run_dir(run_dir, tmp_path):
    folder = _sweep(run_dir, tmp_path / "sweep", ["runs/good", *HOSTILE])
    result = write_report(folder, collect_fn=lambda f: Collected(_frame(f), [], []))
    pages = [result.html, *result.run_reports]
    assert folder / "runs" / "good" / "report.html" in result.run_reports
    for page in pages:
        hrefs = _assert_links_stay_inside(page, folder)
        for value in HOSTILE:
            assert not any(value.strip().lower() in unquote(h).lower() for h in hrefs), (page, value)
    hrefs = _tags(result.html).hrefs
    n_claims = sum(c.startswith("claim.") for c in _frame(folder).columns)
    # the good point is linked in the matrix (column header and each claim's cell), the runs table and the collect table
    assert hrefs.count("runs/good/report.html") == 1 + n_claims + 2
    for page in result.run_reports:  # each run page links back to the sweep report
        back = _tags(page).hrefs[0]
        assert (page.parent / back).resolve() == result.html.resolve()
    text = result.html.read_text()
    assert "javascript:alert(document.domain)" in text  # shown as text, not as a link


def test_reproduce_report_links_no_hostile_run_dir_or_figure(run_dir, tmp_path):
    folder = tmp_path / "rep"
    folder.mkdir()
    png = next((run_dir / "figures").glob("*.png"))
    runs = [{"name": "good", "run_dir": "ntp/runs/good", "figures": ["ntp/figures/good.png"]}]
    _copy_run(run_dir, folder / "ntp" / "runs" / "good")
    (folder / "ntp" / "figures").mkdir(parents=True)
    shutil.copyfile(png, folder / "ntp" / "figures" / "good.png")
    shutil.copyfile(png.with_suffix(".pdf"), folder / "ntp" / "figures" / "good.pdf")
    for i, value in enumerate(HOSTILE):
        if _lexically_inside(value):  # a real run folder and figure (with its PDF) at the crafted path
            _copy_run(run_dir, folder / value)
            (folder / value / "x.pdf").write_bytes(b"%PDF-1.4")
            shutil.copyfile(png, folder / value / "x.png")
        runs.append({"name": f"bad{i}", "run_dir": value, "figures": [f"{value}/x.png"]})
    for run in runs:
        run.update(preset="example1", status="done", error=None, config_hash="0" * 16, seeds=[0], seconds=1.0,
                   claims=[{"id": "c", "statement": "s", "holds": True, "evidence": "e"}])
    (folder / "reproduce.json").write_text(json.dumps({"lab": "all", "quick": True, "specs": []}))
    (folder / "claims.json").write_text(json.dumps({"lab": "all", "quick": True, "runs": runs}))
    result = write_report(folder)
    for page in [result.html, *result.run_reports]:
        hrefs = _assert_links_stay_inside(page, folder)
        for value in HOSTILE:
            assert not any(value.strip().lower() in unquote(h).lower() for h in hrefs), (page, value)
    hrefs = _tags(result.html).hrefs
    assert {"ntp/runs/good/report.html", "ntp/figures/good.pdf", "#run-good"} <= set(hrefs)
    good_page = folder / "ntp" / "runs" / "good" / "report.html"
    assert good_page in result.run_reports
    assert "../../../report.html" in _tags(good_page).hrefs  # three folders down: the back link climbs three


# ------------------------------------------------------------------------ embedding
def _outside_png(tmp_path: Path) -> tuple[Path, bytes]:
    """A PNG outside every report folder, with bytes no figure inside has."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(2, 1.5))
    ax.plot([0, 1], [1, 0], color="C3")
    path = tmp_path / "secret" / "private.png"
    path.parent.mkdir()
    fig.savefig(path)
    plt.close(fig)
    return path, path.read_bytes()


def _embedded(page: Path) -> list[bytes]:
    return [base64.b64decode(src[len(EMBEDDED):]) for src in _tags(page).srcs if src.startswith(EMBEDDED)]


def test_reproduce_report_embeds_only_figures_inside_its_folder(run_dir, tmp_path):
    outside, secret = _outside_png(tmp_path)
    folder = tmp_path / "rep"
    _copy_run(run_dir, folder / "runs" / "a")
    (folder / "figures").mkdir()
    good = next((run_dir / "figures").glob("*.png"))
    shutil.copyfile(good, folder / "figures" / "good.png")
    rel = Path("..") / outside.relative_to(tmp_path)
    names = ["figures/good.png", rel.as_posix(), str(outside), "figures/../../secret/private.png"]
    run = {"name": "a", "preset": "example1", "status": "done", "error": None, "config_hash": "0" * 16, "seeds": [0],
           "seconds": 1.0, "claims": [], "figures": names, "run_dir": "runs/a"}
    (folder / "reproduce.json").write_text(json.dumps({"lab": "ntp", "quick": True, "specs": []}))
    (folder / "claims.json").write_text(json.dumps({"lab": "ntp", "quick": True, "runs": [run]}))
    result = write_report(folder)
    embedded = _embedded(result.html)
    assert embedded == [good.read_bytes()] and list(result.figures) == [folder / "figures" / "good.png"]
    assert secret not in embedded and base64.b64encode(secret).decode() not in result.html.read_text()
    text = html.unescape(result.html.read_text())
    for name in names[1:]:
        assert f"figure {Path(name).stem} skipped: not inside the report's folder" in text
    assert result.missing == tuple(Path(n).stem for n in names[1:])
    # names that are no file at all: a page without them, no traceback
    (folder / "claims.json").write_text(json.dumps({"lab": "ntp", "quick": True,
                                                    "runs": [{**run, "figures": ["", ".", "figures/", ".."]}]}))
    odd = write_report(folder)
    assert odd.figures == () and len(odd.missing) == 4


def test_run_sweep_and_reproduce_pages_refuse_a_symlink_inside_their_folder(run_dir, tmp_path):
    """A link inside a run, sweep or reproduce folder (a figure, the config) is one line and no page:
    the store never follows a link there (it would embed or link an outside file)."""
    from stagewise.errors import UserError

    outside, secret = _outside_png(tmp_path)
    run = _copy_run(run_dir, tmp_path / "run")
    (run / "figures" / "leak.png").symlink_to(outside)
    with pytest.raises(UserError, match="leak.png: is a symbolic link"):
        write_report(run)
    assert not (run / "report.html").exists()
    (run / "figures" / "leak.png").unlink()
    (run / "config.yaml").rename(tmp_path / "config.yaml")
    (run / "config.yaml").symlink_to(tmp_path / "config.yaml")
    with pytest.raises(UserError, match="config.yaml: is a symbolic link"):
        write_report(run)
    folder = _sweep(run_dir, tmp_path / "sweep", ["runs/good"])
    (folder / "collect").mkdir()
    (folder / "collect" / "leak.png").symlink_to(outside)
    with pytest.raises(UserError, match="is a symbolic link"):
        write_report(folder, collect_fn=lambda f: Collected(_frame(f), [f / "collect" / "leak.png"], []))
    assert not (folder / "report.html").exists() and not (folder / "report" / "figures" / "leak.png").exists()


# ------------------------------------------------------------------------ markup injection
MARKUP = "<img src=x onerror=alert(1)><script>alert(2)</script>' onmouseover='alert(3)\" x=\"<b>bold</b>&amp;"
"""A value a user controls (run name, claim text, token, note, error): must stay text."""

PAGE_TAGS = {"html", "head", "meta", "title", "style", "body", "h1", "h2", "h3", "p", "a", "b", "br", "small", "code",
             "span", "div", "table", "tr", "th", "td", "details", "summary", "pre", "figure", "img", "figcaption", "ul",
             "li"}
"""Every tag the templates write (``b`` and ``img`` included, so a leak is seen by count and attributes)."""


def _assert_no_injected_markup(page: Path) -> None:
    tags = _tags(page)
    assert set(tags.tags) <= PAGE_TAGS, set(tags.tags) - PAGE_TAGS
    assert "script" not in tags.tags and not any(a.lower().startswith("on") for a in tags.attributes)
    assert all(src.startswith(EMBEDDED) for src in tags.srcs)
    assert not any(a in ("x", "onerror", "onmouseover") for a in tags.attributes)
    text = page.read_text(encoding="utf-8")
    assert "<b>bold</b>" not in text and "<script>" not in text


def test_user_values_cannot_inject_markup(run_dir, tmp_path):
    """Run name, claim id / statement / evidence / reason, manifest note and error, a
    metric name (a token), a sweep point label, axis, warning and collect-table cell:
    all printed as text on every page kind."""
    run = _copy_run(run_dir, tmp_path / "run")
    summary = json.loads((run / "summary.json").read_text())
    first = summary["claims"][0]
    summary["claims"][0] = {**first, "statement": MARKUP, "evidence": MARKUP, "id": f"c{MARKUP}"}
    summary["claims"].append({"id": "untested", "statement": MARKUP, "holds": None, "verdict": "not testable",
                              "reason": MARKUP, "evidence": MARKUP})
    summary["final"][MARKUP] = {"mean": 1.0, "min": 1.0, "max": 1.0}
    summary["details"] = {"token": MARKUP}
    (run / "summary.json").write_text(json.dumps(summary))
    manifest = json.loads((run / "manifest.json").read_text())
    manifest.update(status="failed", error=f"ValueError: {MARKUP}", notes={"note": MARKUP})
    (run / "manifest.json").write_text(json.dumps(manifest))
    (run / "config.yaml").write_text(f"note: '{MARKUP}'\n")
    pages = [write_report(run).html]
    # a reproduce folder whose run is named with markup
    folder = tmp_path / "rep"
    _copy_run(run, folder / "runs" / "r")
    claims = json.loads((run / "summary.json").read_text())["claims"]
    report_run = {"name": MARKUP, "preset": MARKUP, "status": "failed", "error": MARKUP, "config_hash": MARKUP,
                  "seeds": [0], "seconds": 1.0, "claims": claims, "figures": [], "run_dir": "runs/r"}
    (folder / "reproduce.json").write_text(json.dumps({"lab": "ntp", "quick": True, "specs": []}))
    (folder / "claims.json").write_text(json.dumps({"lab": MARKUP, "quick": True, "runs": [report_run]}))
    reproduced = write_report(folder)
    pages += [reproduced.html, *reproduced.run_reports]
    # a sweep whose point label, axis, warning and collected values carry markup
    sweep = _sweep(run_dir, tmp_path / "sweep", ["runs/good"])
    for name in ("summary.json", "manifest.json", "config.yaml"):  # its run: the marked-up one
        shutil.copyfile(run / name, sweep / "runs" / "good" / name)
    index = json.loads((sweep / "sweep.json").read_text())
    index["points"][0]["label"] = MARKUP
    index["axes"] = [MARKUP]
    (sweep / "sweep.json").write_text(json.dumps(index))
    frame = _frame(sweep).assign(**{MARKUP: MARKUP, f"claim.{MARKUP}": True})
    swept = write_report(sweep, collect_fn=lambda f: Collected(frame, [], [MARKUP]))
    pages += [swept.html, *swept.run_reports]
    for page in pages:
        _assert_no_injected_markup(page)
        assert MARKUP in html.unescape(page.read_text(encoding="utf-8")), page  # shown, as text
