"""Labs and their contract. A lab is a :class:`Lab` value (see :mod:`.contract`) registered
in :mod:`.registry`; :class:`RunSpec` (plain data) says which lab, preset and overrides to
run, and :mod:`.resolve` turns it into the lab, the validated config and its hash.

Importing this package is cheap (no torch, pandas or lab code): labs load on first use."""

from .contract import Lab, Reproduction, Resources, RunContext, RunResult, Tables, reproduction
from .registry import REGISTRY, get_lab, metric_aliases
from .resolve import spec_config, spec_hash, spec_lab
from .spec import RunSpec

__all__ = ["REGISTRY", "Lab", "Reproduction", "Resources", "RunContext", "RunResult", "RunSpec", "Tables", "get_lab",
           "metric_aliases", "reproduction", "spec_config", "spec_hash", "spec_lab"]
