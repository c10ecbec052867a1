"""No symbolic links inside a run or sweep folder.

The store reads, writes, truncates and deletes files by name inside its folders (the lock,
the manifest, tables, figures, checkpoints, the sweep index). A link in there would make it
act on whatever the link points to: truncate an outside file to a process id (``.lock``),
delete an outside folder's Parquet files (``tables/``), overwrite outside files
(``figures/``) or embed an outside file in a report (``config.yaml``). So every entry below a
folder the store is about to use is checked first, and a link is refused with one line
(nothing done). The folder itself may be a link (a user's choice of where runs live).
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import UserError

MAX_ENTRIES = 1_000_000
"""Entries checked at most (a sweep of 10,000 runs with 50 files each is 500,000); beyond it the
walk stops: a folder that large is not a run or sweep folder."""


def refuse_links(folder: str | Path) -> None:
    """One UserError line naming the first symbolic link found below ``folder`` (not following
    any); nothing when there is none or ``folder`` does not exist."""
    root = Path(folder)
    if not root.is_dir():
        return
    seen = 0
    for here, dirs, files in os.walk(root, followlinks=False):
        for name in (*dirs, *files):
            seen += 1
            path = Path(here) / name
            if path.is_symlink():
                raise UserError(f"{path}: is a symbolic link; stagewise never follows a link inside a run or sweep folder "
                                "(remove it, or put the file or folder itself there)")
        if seen > MAX_ENTRIES:
            return


RUN_FOLDERS = ("checkpoints", "tables", "figures", "snapshots")
"""The entries of a run folder that must be folders (RunPaths)."""
RUN_FILES = ("config.yaml", "manifest.json", "metrics.jsonl", "metrics.parquet", "summary.json", "error.log")
"""The entries of a run folder that must be regular files."""


def check_resumable(root: str | Path) -> None:
    """Before a run folder is resumed: one UserError line, with nothing changed (the run keeps
    its status), when the user's hands damaged its layout: an entry that should be a folder is
    a file (or the reverse), or ``tables/`` holds a Parquet file the store did not write (no
    ``_part`` column, or unreadable). Resuming would otherwise fail half-way and mark the run
    failed for a folder it did not damage."""
    root = Path(root)
    for name in RUN_FOLDERS:
        path = root / name
        if path.exists() and not path.is_dir():
            raise UserError(f"{path}: is a file, where the run keeps its {name} folder; move it out of the run folder "
                            "(the run resumes without it), then resume again")
    for name in RUN_FILES:
        path = root / name
        if path.exists() and not path.is_file():
            raise UserError(f"{path}: is not a regular file; move it out of the run folder, then resume again")
    tables = root / "tables"
    if tables.is_dir():
        import pyarrow.parquet as pq

        for path in sorted(tables.glob("*.parquet")):
            try:
                names = pq.read_schema(path).names
            except Exception as err:  # noqa: BLE001 (any damage: torn, not Parquet at all)
                raise UserError(f"{path}: unreadable table ({type(err).__name__}); move it out of tables/ (a table the run "
                                "logs again is rewritten), then resume again") from None
            if "_part" not in names:
                raise UserError(f"{path}: not a table this run wrote (no _part column); move it out of tables/, then resume "
                                "again") from None
