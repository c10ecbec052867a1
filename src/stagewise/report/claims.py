"""The claim record every lab's summary uses: {id, statement, holds, evidence}."""

from __future__ import annotations

from typing import Any


def claim(cid: str, statement: str, holds: bool, evidence: str) -> dict[str, Any]:
    """One tested statement: ``holds`` is computed from logged metrics, ``evidence`` gives the numbers."""
    return {"id": cid, "statement": statement, "holds": bool(holds), "evidence": evidence}
