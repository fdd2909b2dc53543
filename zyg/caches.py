"""Invalidation of the caches of transformed code.

Registering a rule, or changing the numerics options, makes every specialisation built
before it stale.  The modules that keep such caches (the driver, forward mode, calls of
``zyg.grad`` inside differentiated code) register a clearing function here when they are
imported; the lower layers that cause the change (the rule registry, ``zyg.numerics``)
call :func:`invalidate` without importing the layers above them.
"""
from __future__ import annotations

import threading
from typing import Callable, List

_CLEARERS: List[Callable[[], None]] = []


class _BuildLock:
    """The one lock under which zyg fills its caches of transformed and compiled code
    (``compile.LOAD_LOCK``): first calls from several threads build one at a time, and
    calls of code already built never take it.

    It is numba's own compiler lock (re-entrant), not a second one: zyg's builds compile
    with numba, and numba's compiles can run zyg code (a CUDA kernel typing a device
    gradient builds it through an ``overload``); with two locks, a thread holding zyg's
    waiting for numba's and a thread holding numba's waiting for zyg's would deadlock.
    numba runs one compile at a time anyway.  Before numba is imported (the python
    target) it is a re-entrant lock of zyg's own."""

    __slots__ = ("_own", "_numba")

    def __init__(self):
        self._own = threading.RLock()
        self._numba = None

    def _lock(self):
        lk = self._numba
        if lk is None:
            try:
                from numba.core.compiler_lock import global_compiler_lock as lk
            except ImportError:         # pragma: no cover - numba is a dependency
                return self._own
            self._numba = lk
        return lk

    def acquire(self):
        self._lock().acquire()

    def release(self):
        self._lock().release()

    def __enter__(self):
        self._lock().acquire()
        return self

    def __exit__(self, *exc):
        self._lock().release()
        return False


#: zyg's build lock (see :class:`_BuildLock`); ``zyg.compile.LOAD_LOCK`` is this object
BUILD_LOCK = _BuildLock()


def on_invalidate(fn: Callable[[], None]) -> Callable[[], None]:
    """Register ``fn`` to run at every :func:`invalidate` (usable as a decorator)."""
    if fn not in _CLEARERS:
        _CLEARERS.append(fn)
    return fn


def invalidate() -> None:
    """Forget every compiled specialisation and cached IR (under the build lock: a build
    running in another thread finishes first)."""
    with BUILD_LOCK:
        for fn in list(_CLEARERS):
            fn()
