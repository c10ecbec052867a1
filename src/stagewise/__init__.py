"""stagewise: simulate, measure and reproduce staged training dynamics in transformers.

Public API::

    from stagewise import get_lab, resolve, execute, prepare, UserError
    lab = get_lab("ntp")
    config = resolve(lab.Config, lab.PRESETS["example1"][1])
    paths = prepare(lab, config, "runs/example1")
    execute(lab, config, paths)
"""

from .config import config_hash, resolve
from .errors import UserError
from .labs import REGISTRY, get_lab
from .runs import Diverged, RunContext, execute, load_for_resume, prepare, read_manifest

__version__ = "0.1.0"

__all__ = [
    "REGISTRY", "Diverged", "RunContext", "UserError", "config_hash", "execute", "get_lab", "load_for_resume",
    "prepare", "read_manifest", "resolve", "__version__",
]
