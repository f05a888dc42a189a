"""Training functions that run inside tasks, with safe defaults (see ``tf1``)."""
