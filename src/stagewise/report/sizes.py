"""Disk allowance of a figure (its PNG and PDF, as :func:`stagewise.report.plots.save`
writes them) for the labs' up-front disk estimates.

A lab lists its figures as :class:`FigureSize` values: the PNG and PDF bytes of the figure
with one seed (measured on the lab's own figures, rounded up), how the PNG grows with the
seed lines drawn (the growth flattens as lines overlap: measured close to sqrt(seeds)), and
how many curves per panel draw a line per seed. For S seeds (``s = min(S, MAX_SEED_LINES)``
lines shown, plus their mean), P panels and T points per line::

    png = fixed_png + P (png + png_seeds (sqrt(s) - 1))
    pdf = pdf + P pdf_per_panel + P curves (s + 1) (PDF_BYTES_PER_LINE + pdf_per_point T)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .plots import MAX_SEED_LINES

PDF_BYTES_PER_POINT = 3.5  # one plotted point of a PDF path (Flate-compressed text coordinates); measured 1 to 4.3
PDF_BYTES_PER_LINE = 60  # a line's path header, style and clip in the PDF


@dataclass(frozen=True)
class FigureSize:
    """PNG + PDF allowance of one figure (see the module docstring).

    Attributes:
        png: PNG bytes at one seed (per panel, for figures with a panel per variant).
        png_seeds: PNG growth with the seed lines: ``png_seeds (sqrt(s) - 1)`` (per panel).
        pdf: PDF bytes without the plotted lines.
        curves: curves per panel that draw one line per seed (and their mean).
        fixed_png: PNG bytes outside the per-variant panels (e.g. a table row).
        pdf_per_panel: PDF bytes each panel adds.
        pdf_per_point: PDF bytes of a plotted point (smooth curves compress better than noisy ones).
    """

    png: int
    png_seeds: int = 0
    pdf: int = 0
    curves: float = 0.0
    fixed_png: int = 0
    pdf_per_panel: int = 0
    pdf_per_point: float = PDF_BYTES_PER_POINT

    def bytes(self, seeds: int, points: int = 0, panels: int = 1) -> int:
        """PNG + PDF bytes for ``seeds`` seeds, ``points`` points per plotted line, ``panels`` panels."""
        shown = min(max(seeds, 1), MAX_SEED_LINES)
        png = self.fixed_png + panels * (self.png + self.png_seeds * (math.sqrt(shown) - 1))
        lines = panels * self.curves * (shown + 1)
        pdf = self.pdf + panels * self.pdf_per_panel + lines * (PDF_BYTES_PER_LINE + self.pdf_per_point * points)
        return int(png + pdf)
