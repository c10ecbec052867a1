"""Lab-independent analysis on logged metrics: rate fits, spectra, stage detection."""

from .ratefit import Fit, linear_fit, log_linear_rate, power_exponent, series, values_at
from .spectra import SV_STATS, Spectrum, spectrum, spectrum_metrics, sv_stats, truncate, truncate_svd, truncate_eig
from .stages import StageReport, crossing_step, crossing_steps, detect_stages

__all__ = [
    "Fit",
    "SV_STATS",
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
    "sv_stats",
    "truncate", "truncate_svd",
    "truncate_eig",
    "values_at",
]
