"""The SSA front end: Python source -> SSA control-flow graph with block arguments."""
