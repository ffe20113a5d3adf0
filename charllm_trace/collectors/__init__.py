"""Collectors: capture host ETs, Kineto profiles and GPU telemetry from training runs."""
