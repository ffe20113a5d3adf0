"""Analyses: pure functions of the trace model returning typed results."""
