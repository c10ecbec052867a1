"""An example lab outside the package: a two-layer linear network learns the singular modes
of its target map one after another (Saxe, McClelland & Ganguli, ICLR 2014).

Put ``examples/`` on ``sys.path`` and ``from linear_modes import LAB``; see README.md.
"""

from .lab import LAB

__all__ = ["LAB"]
