"""The ``python`` back end: generated code runs as Python, with numpy's float semantics.

Slow, but every error carries its run-time details, pdb steps through the generated
module, and nothing is compiled: the reference the compiled targets are tested against.
"""
from __future__ import annotations

from .base import Backend


class PythonBackend(Backend):
    name = "python"
    compiled = False
    native_byte_order = False
    nd_masks = True
    zero_guards_first = True

    def tag(self) -> str:
        return "# target python: numpy float semantics (zyg/numerics.py)"
