"""Input resolution: what the user points at (an ET file, a directory of ETs, a run directory,
a Kineto profile, a URL) opened as a Run, through the ET cache and the converters
(docs/architecture.md)."""
