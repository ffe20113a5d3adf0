"""The command line: ``app`` holds the click group and the commands not yet in a module of their
own; ``analyze``, ``compare``, ``cache``, ``telemetry``, ``cpu_wait``, ``astra`` hold theirs
(docs/architecture.md)."""
