"""Figures, reports and `stagewise reproduce`."""
