"""dtfkit benchmarks: ``python -m benchmarks`` (see ``benchmarks/run.py``)."""
