"""Renderers: tables, machine formats, HTML, Perfetto. They format; they never compute."""
