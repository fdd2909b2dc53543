"""Text form of the IR, in the IRTools style (used by ``zyg.show`` and golden tests).

The formatting functions live in :mod:`zyg.ssa.ir` beside the classes they print (their
``__str__``); this module names them for callers.
"""
from .ir import format_block, format_call, format_function  # noqa: F401
