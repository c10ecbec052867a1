"""Lab-independent analysis on logged metrics: rate fits (and, later, spectra, stages)."""

from .ratefit import Fit, linear_fit, log_linear_rate, power_exponent, series

__all__ = ["Fit", "linear_fit", "log_linear_rate", "power_exponent", "series"]
