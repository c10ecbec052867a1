"""manifest.json: read with one-line errors for anything that is not a manifest, update atomically."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..errors import UserError, read_json_object, short_repr
from .store import atomic_write_json

REQUIRED = ("lab", "status", "config_hash", "seeds")
STATUSES = ("running", "done", "failed", "diverged", "interrupted")


def read_manifest(run_dir: str | Path) -> dict[str, Any]:
    """The manifest of ``run_dir``; UserError when it is missing, unreadable or not a manifest."""
    path = Path(run_dir) / "manifest.json"
    if not Path(run_dir).is_dir():
        raise UserError(f"{run_dir}: not a run directory (no such directory)")
    if not path.is_file():
        raise UserError(f"{run_dir}: not a run directory (no manifest.json)")
    data = read_json_object(path, "manifest")
    missing = [k for k in REQUIRED if k not in data]
    if missing:
        raise UserError(f"{path}: not a stagewise manifest (missing {', '.join(missing)})")
    if not isinstance(data["status"], str) or data["status"] not in STATUSES:
        raise UserError(f"{path}: unknown status {short_repr(data['status'])}; expected one of {', '.join(STATUSES)}")
    seeds = data["seeds"]
    if not isinstance(seeds, list) or not all(isinstance(s, int) and not isinstance(s, bool) and -2**63 <= s < 2**63
                                              for s in seeds):
        raise UserError(f"{path}: seeds {short_repr(seeds)} is not a list of 64-bit integer seeds")
    return data


def finished_with(run_dir: str | Path, config_hash: str) -> bool:
    """Whether ``run_dir`` holds a finished run (status done) of ``config_hash``; False when it
    is absent, unfinished, of another config, or its manifest is unreadable."""
    try:
        manifest = read_manifest(run_dir)
    except (UserError, OSError):
        return False
    return manifest.get("status") == "done" and manifest.get("config_hash") == config_hash


def update_manifest(run_dir: str | Path, **changes: Any) -> dict[str, Any]:
    path = Path(run_dir) / "manifest.json"
    manifest = json.loads(path.read_text(encoding="utf-8"))
    manifest.update(changes)
    atomic_write_json(path, manifest)
    return manifest
