"""The objects generated code refers to by name: the rules' helpers and the tapes' own.

:func:`helpers` is what the reverse and forward emitters put into a generated module's
namespace when it handles arrays: the helpers of the array rules
(:func:`zyg.rules.dispatch.helpers`) and those of the array tape and of fancy indexing,
prepared by the back end (numba-compiled on cpu).
"""
from __future__ import annotations

from typing import Any, Dict

from ..rules import dispatch
from . import arraytape, fancy


def helpers(backend: Any) -> Dict[str, Any]:
    """Name -> object for generated code on ``backend`` (a :class:`zyg.backends.Backend`)."""
    rt = {k: backend.helper(v) for k, v in {**arraytape.helpers_py(), **fancy.helpers_py()}.items()}
    out = dispatch.helpers(backend)
    assert not set(out) & set(rt), "a rule helper shadows a tape helper"
    out.update(rt)
    return out
