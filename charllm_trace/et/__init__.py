"""Chakra execution traces (.et) in and out of the trace model."""
