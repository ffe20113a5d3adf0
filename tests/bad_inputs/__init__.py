"""The bad-input corpus (issue 15): hostile or broken inputs, each built on the fly from a small
valid one, and the commands each must refuse with one line and exit code 2.

``valid`` builds the valid inputs, ``cases`` the bad ones, ``runner`` runs them through the CLI
in a process with a memory cap and a time limit per case (tests/inputs/test_bad_input_corpus.py).
"""
