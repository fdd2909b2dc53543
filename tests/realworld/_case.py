"""One corpus entry: a function as a numba user writes it, and a generator of realistic inputs.

``needs`` names the zyg feature the function waits for when zyg cannot differentiate it yet;
the harness marks such a case ``xfail(strict=True)`` so that it is reported the day it passes.
``needs`` is a string (both targets) or a dict ``{target: reason}``.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Sequence, Tuple, Union


class Case:
    """``fn`` differentiated w.r.t. ``argnums`` at ``make_args()`` (fresh arguments per call)."""

    def __init__(self, fn: Callable, make_args: Callable[[], Tuple[Any, ...]],
                 argnums: Union[int, Sequence[int]] = 0,
                 needs: Union[None, str, Dict[str, str]] = None):
        self.fn = fn
        self.make_args = make_args
        self.argnums = argnums
        self.needs = needs

    @property
    def name(self) -> str:
        return getattr(self.fn, "__name__", None) or self.fn.py_func.__name__

    def needs_on(self, target: str) -> Optional[str]:
        if isinstance(self.needs, dict):
            return self.needs.get(target)
        return self.needs
