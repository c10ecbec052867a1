"""docs/run-store.md's listing of an example1 run folder is what a run writes (issue 26: it
listed a `generalization` figure no run draws)."""

from __future__ import annotations

import re
from pathlib import Path

from runcache import EXAMPLE1_SHORT

DOC = Path(__file__).resolve().parents[2] / "docs" / "run-store.md"
INTRO = "A run of\n`--preset example1` holds"


def _braces(word: str) -> list[str]:
    """``figures/{a,b}.{png,pdf}`` -> every name it stands for (shell brace expansion)."""
    found = re.search(r"\{([^{}]*)\}", word)
    if not found:
        return [word]
    return [name for part in found[1].split(",")
            for name in _braces(word[:found.start()] + part + word[found.end():])]


def documented_listing() -> set[str]:
    """The relative paths of the fenced block after the example1 sentence."""
    text = DOC.read_text(encoding="utf-8")
    assert INTRO in text, "the example1 listing moved: update this test"
    block = text.split(INTRO, 1)[1].split("```", 2)[1]
    return {name for word in block.split() for name in _braces(word)}


def test_the_documented_example1_folder_is_what_a_run_writes(run_cache):
    folder = run_cache.path(EXAMPLE1_SHORT)  # example1 cut short: the same files but its checkpoints' steps
    written = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}
    documented = documented_listing()
    checkpoint = re.compile(r"checkpoints/ckpt_\d{4}_\d{10}\.safetensors")
    assert {p for p in documented if not checkpoint.fullmatch(p)} == {p for p in written if not checkpoint.fullmatch(p)}
    assert any(checkpoint.fullmatch(p) for p in documented) and any(checkpoint.fullmatch(p) for p in written)
