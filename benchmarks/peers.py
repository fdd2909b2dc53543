"""Optional peer frameworks (JAX, PyTorch, HIPS autograd): import and describe them.

Every peer is optional. Workload modules call the ``import_*`` helpers inside their
peer builders, so nothing here is imported unless that column is measured. JAX is
configured for float64 on the CPU before its first import.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import os
from types import ModuleType
from typing import Optional

PEERS: tuple[str, ...] = ("jax", "torch", "autograd")
"""Peer frameworks in report order."""

LABELS: dict[str, str] = {"jax": "JAX jit", "torch": "PyTorch eager", "autograd": "autograd"}
"""Column headings."""


def import_jax() -> ModuleType:
    """Import JAX configured for float64 (``jax_enable_x64``) on the CPU."""
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    jax = importlib.import_module("jax")
    jax.config.update("jax_enable_x64", True)
    return jax


def import_torch() -> ModuleType:
    """Import PyTorch."""
    return importlib.import_module("torch")


def import_autograd() -> tuple[ModuleType, ModuleType]:
    """Import HIPS autograd; returns ``(autograd, autograd.numpy)``."""
    return importlib.import_module("autograd"), importlib.import_module("autograd.numpy")


_IMPORTERS = {"jax": import_jax, "torch": import_torch, "autograd": import_autograd}


def availability(name: str) -> tuple[bool, str]:
    """Whether peer ``name`` can be imported: ``(True, version)`` or ``(False, reason)``."""
    if importlib.util.find_spec(name) is None:
        return False, "not installed"
    try:
        _IMPORTERS[name]()
    except Exception as exc:  # a broken install is reported, not raised
        return False, f"import failed: {type(exc).__name__}: {exc}"
    return True, version(name) or "unknown version"


def version(name: str) -> Optional[str]:
    """Version string of an installed distribution or importable module, or None."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        pass
    try:
        return str(importlib.import_module(name).__version__)
    except Exception:
        return None
