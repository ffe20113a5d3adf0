"""The stores: saved results files, the results cache and the compare cache (docs/cache.md,
docs/architecture.md)."""
