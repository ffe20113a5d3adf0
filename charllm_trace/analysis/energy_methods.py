"""The ways energy is integrated (``--energy-method``), in a module that imports nothing, so that
the command line can offer them without loading the analyses.

- ``trapezoid``: power linear between consecutive samples (the default);
- ``step``: each sample held until the next;
- ``counter``: the energy counter's own increments (``analysis/energy_counter.py``).
"""

ENERGY_METHODS = ("trapezoid", "step", "counter")
