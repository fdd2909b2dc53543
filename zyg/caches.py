"""Invalidation of the caches of transformed code.

Registering a rule, or changing the numerics options, makes every specialisation built
before it stale.  The modules that keep such caches (the driver, forward mode, calls of
``zyg.grad`` inside differentiated code) register a clearing function here when they are
imported; the lower layers that cause the change (the rule registry, ``zyg.numerics``)
call :func:`invalidate` without importing the layers above them.
"""
from __future__ import annotations

from typing import Callable, List

_CLEARERS: List[Callable[[], None]] = []


def on_invalidate(fn: Callable[[], None]) -> Callable[[], None]:
    """Register ``fn`` to run at every :func:`invalidate` (usable as a decorator)."""
    if fn not in _CLEARERS:
        _CLEARERS.append(fn)
    return fn


def invalidate() -> None:
    """Forget every compiled specialisation and cached IR."""
    for fn in list(_CLEARERS):
        fn()
