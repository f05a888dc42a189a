"""The engine: what starts, watches and ends the processes of a cluster (see docs/architecture.md)."""
