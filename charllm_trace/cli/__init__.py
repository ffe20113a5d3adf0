"""The command line, one module per command family; ``app`` holds the group
(docs/architecture.md)."""
