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
