"""Lab-independent analysis on logged metrics: rate fits, spectra, stage detection."""

from .ratefit import Fit, linear_fit, log_linear_rate, power_exponent, series, values_at
from .spectra import Spectrum, spectrum, spectrum_metrics, truncate, truncate_eig
from .stages import StageReport, crossing_step, crossing_steps, detect_stages

__all__ = [
    "Fit",
    "Spectrum",
    "StageReport",
    "crossing_step",
    "crossing_steps",
    "detect_stages",
    "linear_fit",
    "log_linear_rate",
    "power_exponent",
    "series",
    "spectrum",
    "spectrum_metrics",
    "truncate",
    "truncate_eig",
    "values_at",
]
