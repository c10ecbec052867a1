"""The lm lab's declared claims (:class:`~stagewise.report.claims.ClaimSpec`), fixed before any run.

Imports nothing heavy: `stagewise claims lm` lists these without torch.
"""

from __future__ import annotations

from ...report.claims import ClaimSpec

CLAIMS: tuple[ClaimSpec, ...] = ()
