"""The objects generated code refers to by name: the rules' helpers and the tapes' own.

:func:`helpers` is what the reverse and forward emitters put into a generated module's
namespace when it handles arrays: the helpers of the array rules
(:func:`zyg.rules.dispatch.helpers`) and those of the array tape and of fancy indexing,
numba-compiled for the cpu target.
"""
from __future__ import annotations

from typing import Any, Dict

from ..numerics import njit, options_tag
from ..rules import dispatch
from . import arraytape, fancy

_RUNTIME: Dict[Any, Dict[str, Any]] = {}


def helpers(target: str) -> Dict[str, Any]:
    """Name -> object for generated code on ``target``."""
    key = (target, options_tag(target))
    rt = _RUNTIME.get(key)
    if rt is None:
        rt = {**arraytape.helpers_py(), **fancy.helpers_py()}
        if target != "python":
            rt = {k: njit(v) for k, v in rt.items()}
        _RUNTIME[key] = rt
    out = dispatch.helpers(target)
    assert not set(out) & set(rt), "a rule helper shadows a tape helper"
    out.update(rt)
    return out
