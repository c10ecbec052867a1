"""Labs and their contract. A lab is a :class:`Lab` value (see :mod:`.contract`) registered
in :mod:`.registry`; :class:`RunSpec` says which lab, preset and overrides to run."""

from .contract import Lab, Reproduction, Resources, RunContext, RunResult, Tables
from .registry import REGISTRY, get_lab
from .spec import RunSpec

__all__ = ["REGISTRY", "Lab", "Reproduction", "Resources", "RunContext", "RunResult", "RunSpec", "Tables", "get_lab"]
