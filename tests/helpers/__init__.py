"""Helpers shared by tests of several layers: traces built in memory, Kineto documents, result
comparisons, the Perfetto checker, the headless browser, the gloo job run under torchrun."""
