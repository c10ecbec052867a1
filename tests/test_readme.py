"""The examples of the README and of the ``docs/`` pages, as a new user meets them: in order,
from a fresh folder, one page at a time.

A page takes part when it holds a block marked ``<!-- readme-test: quick -->`` (the README
always does). Every command of every example block of such a page is read; a folder or file a
command reads must have been made by an earlier command of the same page (``--out``, a
default output folder) or ship in the repository (``examples/``), so no example points at a
folder nothing made. The quick blocks of each page are then run for real (slow tier), in
order, in a fresh folder holding only the repository's ``examples/``: each must exit 0.
Every relative link of the README and of ``docs/`` must point at a file, and at a heading of
it when it names one.
"""

from __future__ import annotations

import ast
import re
import shlex
import subprocess
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
QUICK = "<!-- readme-test: quick -->"
SHELL_LANGS = ("", "bash", "sh", "shell", "console")
PATH_PREFIXES = ("runs/", "reports/", "sweeps/", "./", "../", "/", "examples/")
READS_FOLDER = {"show", "stages", "report"}  # commands whose first argument is a folder
# quick commands and Python blocks of the README before it became a front door (issue 25): they
# moved to docs/ pages with their markers, so the pages together must still run at least as many
QUICK_EXAMPLES_BEFORE = 20
FENCE = re.compile(r"^\s*```(\w*)\s*$")
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


@dataclass(frozen=True)
class Block:
    lang: str
    text: str
    quick: bool
    line: int


def _name(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


def pages() -> list[Path]:
    """The README and every docs page holding a quick block."""
    docs = [p for p in sorted(DOCS.glob("*.md")) if any(b.quick for b in blocks(p))]
    return [README, *docs]


def blocks(page: Path = README) -> list[Block]:
    """The fenced blocks of a page (nested ``` inside list items count as blocks too)."""
    out, lines, i = [], page.read_text(encoding="utf-8").splitlines(), 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if fence:
            start, body = i, []
            i += 1
            while i < len(lines) and not re.match(r"^\s*```\s*$", lines[i]):
                body.append(lines[i])
                i += 1
            before = next((lines[j].strip() for j in range(start - 1, -1, -1) if lines[j].strip()), "")
            out.append(Block(fence[1], "\n".join(body), before == QUICK, start + 1))
        i += 1
    return out


def commands(block: Block) -> list[list[str]]:
    """The ``stagewise ...`` commands of a shell block, as argument lists (comments dropped)."""
    if block.lang not in SHELL_LANGS:
        return []
    out = []
    for line in block.text.splitlines():
        for part in line.split("&&"):
            args = shlex.split(part, comments=True)
            if args and args[0] == "stagewise":
                out.append(args[1:])
    return out


def quick_examples(page: Path) -> int:
    """How many quick commands and quick Python blocks a page runs."""
    return sum(1 if b.lang == "python" else len(commands(b)) for b in blocks(page) if b.quick)


def _option(args: list[str], *names: str) -> str | None:
    for i, arg in enumerate(args):
        if arg in names and i + 1 < len(args):
            return args[i + 1]
    return None


def _positionals(args: list[str]) -> list[str]:
    takes_value = {"--out", "-o", "--preset", "-p", "--config", "-c", "--set", "-s", "--seeds", "--resume", "--sustain",
                   "--executor", "--max-parallel", "--p", "--select", "--keep", "--data", "--paradigms", "--sink"}
    out, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg in takes_value:
            skip = True
        elif not arg.startswith("-"):
            out.append(arg)
    return out


def outputs(args: list[str]) -> list[str]:
    """The folders a command makes."""
    out = _option(args, "--out", "-o")
    if "--dry-run" in args:
        return []
    if out:
        return [out.rstrip("/")]
    if args[:1] == ["reproduce"]:
        return [f"reports/{args[1]}{'-quick' if '--quick' in args else ''}"]
    if args[:1] == ["sweep"] and args[1:2] != ["collect"]:
        return [f"sweeps/{Path(_positionals(args)[0]).stem}"]
    return []


def _under(path: str, made: list[str]) -> bool:
    return any(path == m or path.startswith(m + "/") for m in made)


def inputs(args: list[str], made: list[str]) -> list[str]:
    """The paths a command reads (``RUN@EPOCH`` as RUN; a MODEL that is neither path-like
    nor made before is a hub id, not a path)."""
    found = [_option(args, "--resume"), _option(args, "--config", "-c")]  # always paths
    found += [s.split("=", 1)[1] for s in args if s.startswith("data.file=")]
    pos = _positionals(args)
    if args[:1] and args[0] in READS_FOLDER:
        found.append(pos[1] if len(pos) > 1 else None)
    if args[:2] == ["sweep", "collect"]:
        found.append(pos[2] if len(pos) > 2 else None)
    elif args[:1] == ["sweep"]:
        found.append(pos[1])
    models = pos[2:] if args[:2] == ["lm", "rank-curve"] else pos[2:3] if args[:2] in (["lm", "reduce"], ["eval", "blimp"]) else []
    models = [m.split("@")[0] for m in models]
    found += [m for m in models if m.startswith(PATH_PREFIXES) or m.endswith(".gguf") or _under(m, made)]
    return [p.split("@")[0].rstrip("/") for p in found if p]


def python_outputs(block: Block) -> list[str]:
    """The folders and files a Python block names as relative paths ("runs/mine-lm",
    "mine/probes.yaml"): what it makes for the commands after it (a block that only reads a
    path names it too; the run then fails on it, so the check stays honest)."""
    if block.lang != "python":
        return []
    try:
        tree = ast.parse(block.text)
    except SyntaxError:  # an excerpt (with "..."), not a script: it makes nothing
        return []
    names = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    return sorted(n.rstrip("/") for n in names if re.fullmatch(r"[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)+/?", n)
                  and not n.startswith(("../", "/")))


@pytest.mark.parametrize("page", pages(), ids=_name)
def test_every_path_a_command_reads_was_made_before_or_ships(page):
    made: list[str] = []
    missing = []
    for block in blocks(page):
        made.extend(python_outputs(block))
        for args in commands(block):
            for path in inputs(args, made):
                shipped = (ROOT / path).exists() or path.startswith("../shared/")
                if not shipped and not _under(path, made):
                    missing.append(f"{_name(page)} line {block.line}: stagewise {' '.join(args)}: {path} is made by no earlier example")
            made.extend(outputs(args))
    assert not missing, "\n".join(missing)
    assert any(b.quick for b in blocks(page)), f"{_name(page)}: no block is marked quick"


def test_the_quick_examples_that_left_the_readme_are_still_run():
    counts = {_name(p): quick_examples(p) for p in pages()}
    assert sum(counts.values()) >= QUICK_EXAMPLES_BEFORE, counts


@pytest.mark.slow  # each page's quick blocks for real (runs at preset size): 4-6 min for all pages on 2 busy cores
@pytest.mark.parametrize("page", pages(), ids=_name)
def test_quick_blocks_run_in_order_in_a_fresh_folder(page, cli, tmp_path, monkeypatch):
    from lm_fixtures import SHARED_DATA

    if any(b.quick and "../shared/data" in b.text for b in blocks(page)) and not SHARED_DATA.is_dir():
        pytest.skip(f"{_name(page)} reads ../shared/data, absent here ({SHARED_DATA})")
    repo = tmp_path / "repo"  # the repository's root as a user has it: examples/ inside, the shared data beside
    repo.mkdir()
    (repo / "examples").symlink_to(ROOT / "examples")
    if SHARED_DATA.is_dir():
        (tmp_path / "shared").mkdir()
        (tmp_path / "shared" / "data").symlink_to(SHARED_DATA)
    tmp_path = repo
    monkeypatch.chdir(tmp_path)
    ran = 0
    for block in (b for b in blocks(page) if b.quick):
        if block.lang == "python":
            # run as a pasted script runs: under `if __name__ == "__main__":` too, a library's warning shown, not
            # an error (e.g. torch's DataLoader on a machine without an accelerator under the Trainer's defaults)
            with warnings.catch_warnings():
                warnings.simplefilter("default")
                exec(compile(block.text, f"{_name(page)}:{block.line}", "exec"), {"__name__": "__main__"})
            ran += 1
            continue
        for args in commands(block):
            code, out, err = cli(*args)
            assert code == 0, f"{_name(page)} line {block.line}: stagewise {' '.join(args)} -> exit {code}\n{err[-2000:]}"
            ran += 1
    assert ran == quick_examples(page) >= 1
    if page == README:
        assert (tmp_path / "runs" / "ex1" / "manifest.json").is_file()


SPAWNS = {"run_sweep", "run_local", "run_runs", "reproduce", "reproduce_all"}
"""Calls that start worker processes (the local executor spawns them; each imports the main
script again): an example that makes one must be under ``if __name__ == "__main__":``."""


def _is_main_guard(node: ast.AST) -> bool:
    test = node.test if isinstance(node, ast.If) else None
    return isinstance(test, ast.Compare) and isinstance(test.left, ast.Name) and test.left.id == "__name__" and \
        any(isinstance(c, ast.Constant) and c.value == "__main__" for c in test.comparators)


def unguarded_spawns(code: str) -> list[str]:
    """The names of :data:`SPAWNS` that ``code`` calls outside ``if __name__ == "__main__":``."""
    found, todo = [], [ast.parse(code)]
    while todo:
        node = todo.pop()
        if _is_main_guard(node):
            continue
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            if name in SPAWNS:
                found.append(name)
        todo.extend(ast.iter_child_nodes(node))
    return sorted(found)


@pytest.mark.parametrize("page", [README, *sorted(DOCS.glob("*.md"))], ids=_name)
def test_examples_that_start_workers_are_under_the_main_guard(page):
    """Issue 26: the "Sweeps from Python" block hung when pasted into a script (each spawned
    worker re-ran the sweep and died). Every Python example that starts a sweep or a
    reproduction does so under the guard."""
    bad = [f"{_name(page)} line {b.line}: {', '.join(unguarded_spawns(b.text))}" for b in blocks(page)
           if b.lang == "python" and any(f"{name}(" in b.text for name in SPAWNS) and unguarded_spawns(b.text)]
    assert not bad, "not under `if __name__ == \"__main__\":`\n" + "\n".join(bad)


def test_the_guard_check_sees_a_bare_sweep():
    assert unguarded_spawns("from x import run_sweep\nrun_sweep([], 'out', 'ntp')\n") == ["run_sweep"]
    assert unguarded_spawns("import stagewise\nif __name__ == '__main__':\n    stagewise.reproduce(lab, 'r')\n") == []


@pytest.mark.slow  # a sweep (2 runs x 4 seeds, example1 preset) in a fresh interpreter with spawned workers: about 30 s on 2 cores
def test_the_sweeps_from_python_block_runs_pasted_into_a_script(tmp_path):
    """The block as a user pastes it into ``sweep.py`` and runs ``python sweep.py``: it ends
    (the spawned workers import the script without starting the sweep again) with every run done."""
    block = next(b for b in blocks(DOCS / "python-api.md") if b.lang == "python" and "run_sweep(" in b.text)
    (tmp_path / "sweep.py").write_text(block.text + "\n    print('runs done:', sum(r.status == 'done' for r in results))\n")
    done = subprocess.run([sys.executable, "sweep.py"], cwd=tmp_path, capture_output=True, text=True, timeout=540)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "runs done: 8" in done.stdout and (tmp_path / "sweeps" / "eta" / "report.html").is_file()


def _outside_fences(text: str) -> list[str]:
    """The lines of a page outside its fenced blocks."""
    kept, inside = [], False
    for line in text.splitlines():
        if FENCE.match(line) or re.match(r"^\s*```\s*$", line):
            inside = not inside
        elif not inside:
            kept.append(line)
    return kept


def heading_anchors(page: Path) -> set[str]:
    """GitHub's anchors of a page's headings: lower case, punctuation dropped, spaces as
    hyphens, ``-1``, ``-2`` ... on repeats."""
    anchors: set[str] = set()
    for line in _outside_fences(page.read_text(encoding="utf-8")):
        heading = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if heading:
            slug = re.sub(r"[^\w\- ]", "", heading[1].lower()).replace(" ", "-")
            anchor, n = slug, 0
            while anchor in anchors:
                n += 1
                anchor = f"{slug}-{n}"
            anchors.add(anchor)
    return anchors


@pytest.mark.parametrize("page", [README, *sorted(DOCS.glob("*.md"))], ids=_name)
def test_relative_links_point_at_files_and_headings(page):
    broken = []
    prose = "\n".join(re.sub(r"`[^`]*`", "", line) for line in _outside_fences(page.read_text(encoding="utf-8")))
    for target in LINK.findall(prose):  # links in code are not links
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto: ...
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in heading_anchors(file):
            broken.append(f"{target}: no heading #{anchor} in {_name(file)}")
    assert not broken, f"{_name(page)}:\n" + "\n".join(broken)


@pytest.mark.parametrize("text, expected", [
    ("stagewise run ntp --out runs/a  # note", [["run", "ntp", "--out", "runs/a"]]),
    ("pip install -e . && stagewise reproduce ntp --quick", [["reproduce", "ntp", "--quick"]]),
])
def test_command_extraction(text, expected):
    assert commands(Block("", text, True, 1)) == expected


def test_heading_anchors_follow_github():
    anchors = heading_anchors(DOCS / "run-store.md")
    assert {"sinks-tensorboard-and-wb", "resume", "metric-names"} <= anchors
