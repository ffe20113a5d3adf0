"""Renderers: terminal tables, machine formats (JSON, CSV, Parquet), the HTML report. They format; they never compute."""
