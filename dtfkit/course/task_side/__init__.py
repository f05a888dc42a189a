"""Runs inside the tasks: what the exercise checks run on their clusters, one module per chapter.

The checks themselves (``dtfkit.course.check``) run in the notebook kernel and send these
functions to ``cluster.run`` with the learner's answer as an argument. Nothing here imports the
checks, and TensorFlow is imported inside the functions only.
"""
