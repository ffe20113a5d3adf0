"""The ground floor: the model (polars tables), classification of ops, interval arithmetic, kernel
categories, the call tree, the DAG kernel, errors, limits, bounded file readers, progress.

Everything above may import it; it imports nothing of the package outside ``core``
(docs/architecture.md)."""
