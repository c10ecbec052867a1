"""The README's examples, as a new user meets them: in order, from a fresh folder.

Every command of every example block is read; a folder or file a command reads must have
been made by an earlier command (``--out``, a default output folder) or ship in the
repository (``examples/``), so no example points at a folder nothing made. The blocks
marked ``<!-- readme-test: quick -->`` are then run for real, in order, in a fresh folder
holding only the repository's ``examples/``: each must exit 0.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
QUICK = "<!-- readme-test: quick -->"
SHELL_LANGS = ("", "bash", "sh", "shell", "console")
PATH_PREFIXES = ("runs/", "reports/", "sweeps/", "./", "../", "/", "examples/")
READS_FOLDER = {"show", "stages", "report"}  # commands whose first argument is a folder


@dataclass(frozen=True)
class Block:
    lang: str
    text: str
    quick: bool
    line: int


def blocks() -> list[Block]:
    """The fenced blocks of the README (nested ``` inside list items count as blocks too)."""
    out, lines, i = [], README.read_text(encoding="utf-8").splitlines(), 0
    while i < len(lines):
        fence = re.match(r"^\s*```(\w*)\s*$", lines[i])
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


def test_every_path_a_command_reads_was_made_before_or_ships():
    made: list[str] = []
    missing = []
    for block in blocks():
        for args in commands(block):
            for path in inputs(args, made):
                shipped = (ROOT / path).exists() or path.startswith("../shared/")
                if not shipped and not _under(path, made):
                    missing.append(f"README line {block.line}: stagewise {' '.join(args)}: {path} is made by no earlier example")
            made.extend(outputs(args))
    assert not missing, "\n".join(missing)
    assert any(b.quick for b in blocks()), "no block is marked quick"


@pytest.mark.slow  # every quick block of the README in a fresh folder (reproduce, sweeps, reports): ~40 s
def test_quick_blocks_run_in_order_in_a_fresh_folder(cli, tmp_path, monkeypatch):
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    monkeypatch.chdir(tmp_path)
    ran = 0
    for block in (b for b in blocks() if b.quick):
        if block.lang == "python":
            exec(compile(block.text, f"README.md:{block.line}", "exec"), {"__name__": "readme"})
            ran += 1
            continue
        for args in commands(block):
            code, out, err = cli(*args)
            assert code == 0, f"README line {block.line}: stagewise {' '.join(args)} -> exit {code}\n{err[-2000:]}"
            ran += 1
    assert ran >= 10
    assert (tmp_path / "runs" / "ex1" / "manifest.json").is_file()


@pytest.mark.parametrize("text, expected", [
    ("stagewise run ntp --out runs/a  # note", [["run", "ntp", "--out", "runs/a"]]),
    ("pip install -e . && stagewise reproduce ntp --quick", [["reproduce", "ntp", "--quick"]]),
])
def test_command_extraction(text, expected):
    assert commands(Block("", text, True, 1)) == expected
