"""Golden outputs of the command line on every fixture and shared trace (issue 23, item 7).

``python -m tests.golden.record`` writes them to tests/golden/data; tests/e2e/test_golden.py recomputes and
compares. What is recorded and normalised: tests/golden/README.md.
"""
