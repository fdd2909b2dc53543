"""``zyg.hook`` and ``zyg.checkpoint``: functions that take a function argument.

Outside differentiated code both are what they say in Python (identity, a plain call).
Inside, the lowering binds their function argument statically (``zyg/ssa/lower.py``):

* ``hook(fn, x)`` becomes a call of ``Hooked(fn)``, whose rule is ``y = x`` forward and
  ``dx = fn(dy)`` backward.  The rule is an ordinary closure-converted rule, made by
  :func:`hook_rule` for each ``fn``.
* ``checkpoint(fn, *args)`` becomes a call of ``Checkpointed(fn)``: the forward pass
  calls ``fn`` without recording anything; the backward pass runs ``fn``'s pullback
  from the saved arguments (recomputing ``fn``) and applies it to the cotangent
  (``zyg/nested/recursion.py``, which does the same for recursive calls).
"""
from __future__ import annotations

from typing import Any, Dict

from ..ssa import hooks
from ..ssa.lower import unwrap
from .registry import Rule


def hook(fn, x):
    """Identity in the forward pass; in the backward pass the cotangent of ``x`` is
    ``fn(cotangent)`` (gradient clipping, scaling, inspection).  ``fn`` must be a
    module-level function that numba can compile on the cpu target."""
    return x


def checkpoint(fn, *args):
    """``fn(*args)``, not recorded: the backward pass recomputes ``fn`` from ``args`` to get
    its pullback.  Trades time (``fn`` runs twice) for tape memory."""
    return fn(*args)


def checkpointed_range(*args, snapshots: int = 10):
    """``range(*args)`` (one or two arguments) whose loop zyg differentiates with binomial
    checkpointing: ``for t in zyg.checkpointed_range(T, snapshots=s): ...``.

    The backward pass holds at most ``snapshots`` copies of the loop's state (the values
    carried from one iteration to the next) and one iteration's tape, instead of the tape
    of all ``T`` iterations; iterations are recomputed instead (Griewank and Walther's
    Revolve schedule).  Outside differentiated code this is ``range``.
    See docs/higher_order.md (Checkpointed loops)."""
    if not 1 <= len(args) <= 2:
        raise TypeError("checkpointed_range takes 1 or 2 positional arguments (stop or start, stop)")
    if int(snapshots) < 1:
        raise ValueError(f"checkpointed_range: snapshots must be at least 1 (got {snapshots})")
    return range(*args)


class Hooked:
    """The primitive ``hook(fn, .)`` with ``fn`` bound."""

    def __init__(self, fn: Any):
        self.fn = fn
        self.__name__ = f"hook[{getattr(fn, '__name__', 'fn')}]"
        self.__qualname__ = self.__name__

    def __eq__(self, other) -> bool:
        return isinstance(other, Hooked) and other.fn is self.fn

    def __hash__(self) -> int:
        return hash(("Hooked", id(self.fn)))

    def __call__(self, x):
        return x

    def __repr__(self) -> str:
        return self.__name__


class Checkpointed:
    """The primitive ``checkpoint(fn, ...)`` with ``fn`` bound."""

    def __init__(self, fn: Any):
        self.fn = fn
        self.__name__ = f"checkpoint[{getattr(fn, '__name__', 'fn')}]"
        self.__qualname__ = self.__name__

    def __eq__(self, other) -> bool:
        return isinstance(other, Checkpointed) and other.fn is self.fn

    def __hash__(self) -> int:
        return hash(("Checkpointed", id(self.fn)))

    def __call__(self, *args):
        return self.fn(*args)

    def __repr__(self) -> str:
        return self.__name__


def _make_hook_rule(fn):
    def hooked(x):
        def back(dy):
            return (fn(dy),)
        return x, back
    return hooked


_HOOK_RULES: Dict[Any, Rule] = {}


def hook_rule(prim: Hooked) -> Rule:
    """The rule of ``hook(fn, .)``: built once per ``fn``."""
    r = _HOOK_RULES.get(prim.fn)
    if r is None:
        r = _HOOK_RULES[prim.fn] = Rule(prim, _make_hook_rule(prim.fn))
    return r


# the front end lowers zyg.hook(f, x) and zyg.checkpoint(f, *args) to these primitives
hooks.FUNCTION_PRIMS[hook] = hooks.FunctionPrim("hook", Hooked, 1)
hooks.FUNCTION_PRIMS[checkpoint] = hooks.FunctionPrim("checkpoint", lambda f: Checkpointed(unwrap(f)), None)


# recursive calls and zyg.checkpoint: their rules call the callee's pullback at run time,
# through the driver; the module that makes them (zyg/nested/recursion.py) sits above
# the driver, and the transforms reach it through this slot
_RECURSIVE_CALLS: list = []


def provide_recursive_calls(impl: Any) -> None:
    _RECURSIVE_CALLS[:] = [impl]


def recursive_calls() -> Any:
    """The provider of ``recursive_rule``, ``call_helper`` and ``grad_helper``."""
    if not _RECURSIVE_CALLS:
        raise RuntimeError("zyg.nested.recursion is not imported (import zyg first)")
    return _RECURSIVE_CALLS[0]
