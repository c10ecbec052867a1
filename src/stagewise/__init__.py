"""stagewise: simulate, measure and reproduce staged training dynamics in transformers.

Public API::

    from stagewise import RunSpec, execute_spec, get_lab, load_run
    spec = RunSpec(lab="ntp", preset="example1", overrides={"train": {"steps_stage2": 60}}, name="x")
    manifest = execute_spec(spec, "runs/x")       # or: stagewise run ntp --preset example1 ...
    lab = get_lab("ntp")                          # a Lab value: Config, presets, run, summarize, ...
    run = load_run("runs/x")                      # config, manifest, summary; metrics and claims as DataFrames

The names load on first use (PEP 562): ``import stagewise`` imports no torch, pandas or
orchestration code; ``stagewise.execute_spec`` imports what running needs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .lazy import lazy_exports

if TYPE_CHECKING:
    from .config import config_hash, resolve
    from .engine import Diverged
    from .errors import UserError
    from .labs import REGISTRY, Lab, RunContext, RunSpec, get_lab, spec_config, spec_hash, spec_lab
    from .orchestrate import execute, execute_spec, load_for_resume, prepare, reproduce
    from .orchestrate.load import SweepView, load_run, load_sweep
    from .orchestrate.track import Tracker
    from .orchestrate.trackhf import StagewiseCallback
    from .report.claims import Claim, ClaimSpec, Source, Summary
    from .report.runview import RunView
    from .runs import MemoryContext, read_manifest

_EXPORTS: dict[str, str] = {
    **dict.fromkeys(("config_hash", "resolve"), ".config"),
    "Diverged": ".engine",
    "UserError": ".errors",
    **dict.fromkeys(("REGISTRY", "Lab", "RunContext", "RunSpec", "get_lab", "spec_config", "spec_hash", "spec_lab"), ".labs"),
    **dict.fromkeys(("execute", "execute_spec", "load_for_resume", "prepare", "reproduce"), ".orchestrate"),
    **dict.fromkeys(("SweepView", "load_run", "load_sweep"), ".orchestrate.load"),
    "Tracker": ".orchestrate.track",
    "StagewiseCallback": ".orchestrate.trackhf",
    **dict.fromkeys(("Claim", "ClaimSpec", "Source", "Summary"), ".report.claims"),
    "RunView": ".report.runview",
    **dict.fromkeys(("MemoryContext", "read_manifest"), ".runs"),
}

__all__ = [
    "REGISTRY", "Claim", "ClaimSpec", "Diverged", "Lab", "MemoryContext", "RunContext", "RunSpec", "RunView", "Source", "Summary",
    "StagewiseCallback", "SweepView", "Tracker", "UserError", "config_hash", "execute", "execute_spec",
    "get_lab", "load_for_resume", "load_run", "load_sweep",
    "prepare", "read_manifest", "reproduce", "resolve", "spec_config", "spec_hash", "spec_lab", "__version__",
]


def _version() -> str:
    """The installed distribution's version (``importlib.metadata``); "unknown" when not installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("stagewise")
    except PackageNotFoundError:
        return "unknown"


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals(), __all__, extra={"__version__": _version})
