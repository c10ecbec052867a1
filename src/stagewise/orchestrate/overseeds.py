"""Claims over seeds for a sweep or a reproduce folder: the lab's ``across_runs`` on the
(config, summary) of every finished run (:attr:`stagewise.labs.contract.Lab.across_runs`)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..config import validate
from ..errors import UserError
from ..labs import get_lab
from ..report.claims import Claim, Summary
from ..report.runview import read_run


def finished_runs(run_dirs: Iterable[Path]) -> list[tuple[str, Any, Summary]]:
    """(lab name, validated config, summary) of each run folder that finished with a summary;
    unreadable folders are skipped (the report names them elsewhere)."""
    out = []
    for run_dir in run_dirs:
        try:
            run = read_run(run_dir)
            if run.manifest.get("status") != "done" or run.summary is None:
                continue
            lab = get_lab(str(run.manifest["lab"]))
            out.append((lab.name, validate(lab.Config, run.config), run.summary))
        except (UserError, OSError, KeyError, TypeError):
            continue
    return out


def over_seeds(run_dirs: Iterable[Path]) -> list[Claim]:
    """Every lab's claims over seeds among the finished runs in ``run_dirs`` (labs without
    ``across_runs``, or runs of one seed each with nothing to pair, give none)."""
    runs = finished_runs(run_dirs)
    claims: list[Claim] = []
    for name in dict.fromkeys(lab for lab, _, _ in runs):
        lab = get_lab(name)
        if lab.across_runs is not None:
            claims += lab.across_runs([(config, summary) for other, config, summary in runs if other == name])
    return claims
