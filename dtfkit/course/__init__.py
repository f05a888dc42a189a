"""Course tooling: exercise checks, classroom grading, student copies, data sets and devices."""
