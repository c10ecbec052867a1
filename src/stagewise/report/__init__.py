"""Figures helpers, the Summary/Claim records and report rendering (below the labs)."""
