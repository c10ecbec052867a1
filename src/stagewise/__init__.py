"""stagewise: simulate, measure and reproduce staged training dynamics in transformers.

Public API::

    from stagewise import RunSpec, execute_spec, get_lab
    spec = RunSpec(lab="ntp", preset="example1", overrides={"train": {"steps_stage2": 60}}, name="x")
    manifest = execute_spec(spec, "runs/x")       # or: stagewise run ntp --preset example1 ...
    lab = get_lab("ntp")                          # a Lab value: Config, presets, run, summarize, ...
"""

from .config import config_hash, resolve
from .engine import Diverged
from .errors import UserError
from .labs import REGISTRY, Lab, RunContext, RunSpec, get_lab
from .orchestrate import execute, execute_spec, load_for_resume, prepare, reproduce
from .report.claims import Claim, Summary
from .runs import MemoryContext, read_manifest

__version__ = "0.1.0"

__all__ = [
    "REGISTRY", "Claim", "Diverged", "Lab", "MemoryContext", "RunContext", "RunSpec", "Summary", "UserError",
    "config_hash", "execute", "execute_spec", "get_lab", "load_for_resume", "prepare", "read_manifest", "reproduce",
    "resolve", "__version__",
]
