"""Traces for other tools: Perfetto (Chrome JSON) and ASTRA-sim (Chakra ET per rank)
(docs/architecture.md)."""
