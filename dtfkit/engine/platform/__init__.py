"""The machine under both sides: network namespaces, process lifelines, state files, admission,
the task environment, GPUs, and the notebook facts. Imports nothing else of dtfkit's engine."""
