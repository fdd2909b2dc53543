"""A GradBench tool for zyg (see README.md in this folder)."""
