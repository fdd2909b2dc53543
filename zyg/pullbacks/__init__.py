"""Pullbacks: the reverse-mode transform of SSA functions (primal + adjoint)."""
