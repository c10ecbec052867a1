"""A worker of one's own for the executors (tests/orchestrate/test_executor_workers.py): run_task's
signature and contract, without a lab run (the pretraining study passes one like it)."""

from __future__ import annotations

import json
import os
from pathlib import Path


def echo_worker(spec_json: str, root: str, key: str, block: bool = False, catch_stop: bool = True,
                allow_large: bool = False, sinks: tuple[str, ...] = ()) -> tuple[str, str | None]:
    """Writes ROOT/echo/KEY.json with the spec and this process's id; a spec asking to fail fails."""
    spec = json.loads(spec_json)
    if spec.get("fail"):
        return "failed", f"asked to fail: {key}"
    folder = Path(root) / "echo"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{key}.json").write_text(json.dumps({"spec": spec, "pid": os.getpid()}))
    return "done", None
