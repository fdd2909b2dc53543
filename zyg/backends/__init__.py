"""The back ends: one :class:`~zyg.backends.base.Backend` object per target.

``get(target)`` gives the back end of a target name; the driver hands it to the transforms
(as ``Plan.backend``), which ask it what differs between targets, and to which it returns
the generated module to compile.  A new back end is a module beside ``python.py`` and
``cpu.py`` and a line in ``_BACKENDS`` below (or, from outside zyg, :func:`register`).
"""
from __future__ import annotations

from typing import Dict, Tuple, Union

from .base import Backend
from .cpu import CpuBackend
from .cuda import CudaBackend
from .python import PythonBackend

_BACKENDS: Dict[str, Backend] = {b.name: b for b in (PythonBackend(), CpuBackend(), CudaBackend())}
TARGETS: Tuple[str, ...] = tuple(_BACKENDS)


def register(backend: Backend) -> Backend:
    """Make ``backend`` the back end of the target named ``backend.name`` (every
    ``target=`` argument of the API accepts the name from then on).  Replacing a back
    end forgets what was compiled for the name in this process; on disk, generated modules
    are keyed by their text, whose first lines are ``backend.tag()``: a back end's tag
    must name everything its compiled code depends on besides the text."""
    global TARGETS
    if not isinstance(backend, Backend) or not backend.name:
        raise TypeError("register() takes a zyg.backends.Backend with a name")
    old = _BACKENDS.get(backend.name)
    _BACKENDS[backend.name] = backend
    if old is not None and old is not backend:
        # code compiled by the back end it replaces is keyed by the same name
        from ..caches import invalidate
        invalidate()
    TARGETS = tuple(_BACKENDS)
    return backend


def get(target: Union[str, Backend]) -> Backend:
    """The back end of ``target`` (a name in :data:`TARGETS`, or a back end)."""
    if isinstance(target, Backend):
        return target
    got = _BACKENDS.get(target)
    if got is None:
        raise ValueError(f"unknown target {target!r}; expected one of {tuple(_BACKENDS)}")
    return got


def host(target: Union[str, Backend], api: str) -> Backend:
    """The back end of ``target`` for ``api``, an entry point whose code runs on the host
    (ValueError for a device target such as ``cuda``)."""
    b = get(target)
    if not b.host:
        raise ValueError(f"{api}(..., target={b.name!r}) is not available: the {b.name} target "
                         "gives device functions through zyg.grad and zyg.value_and_grad, and "
                         "batches through zyg.vmap (docs/cuda.md)")
    return b


__all__ = ["Backend", "TARGETS", "get", "host", "register"]
