"""Where a task runs: the launcher contract, local processes (forked from the task zygote), the
fake for fast tests, and the one place that chooses among them. Runs in the owner's process; never imports TensorFlow."""
