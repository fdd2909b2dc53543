"""``zyg.hook`` and ``zyg.checkpoint``: functions that take a function argument.

Outside differentiated code both are what they say in Python (identity, a plain call).
Inside, the lowering binds their function argument statically (``zyg/ssa/lower.py``):

* ``hook(fn, x)`` becomes a call of ``Hooked(fn)``, whose rule is ``y = x`` forward and
  ``dx = fn(dy)`` backward.  The rule is an ordinary closure-converted rule, made by
  :func:`hook_rule` for each ``fn``.
* ``checkpoint(fn, *args)`` becomes a call of ``Checkpointed(fn)``: the forward pass
  calls ``fn`` without recording anything; the backward pass runs ``fn``'s pullback
  from the saved arguments (recomputing ``fn``) and applies it to the cotangent
  (``zyg/pullbacks/recursion.py``, which does the same for recursive calls).
"""
from __future__ import annotations

from typing import Any, Dict

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


class CkLoop(Checkpointed):
    """A checkpointed loop: ``CkLoop(runner)(T, t0, s, *carried, *read)`` is the loop's final
    carried values packed into a float64 vector (``zyg/pullbacks/ckloop.py``)."""

    def __init__(self, runner: Any):
        super().__init__(runner)
        self.__name__ = self.__qualname__ = "checkpointed_range loop"

    def primal_src(self, em, st, args) -> str:
        return _runner_call(em, st, args, self.fn)

    def tangent_src(self, em, st, args) -> str:
        """Forward mode: the step's jvp run T times (no checkpointing is needed)."""
        from ..pullbacks.ckloop import PACKED_KIND
        from ..pullbacks.recursion import _python_call
        kinds = [em.kind(a) for a in st.expr.args]
        key = ("tangent", tuple(kinds), em.p.target)
        h = self.fn.helpers.get(key)
        if h is None:
            n = len(kinds)
            params = [f"a{i}" for i in range(2 * n)]
            h = self.fn.helpers[key] = _python_call(
                "ckpt_tangent", params, f"_zyg_r.tangent({em.p.target!r}, {', '.join(params)})",
                PACKED_KIND, {"_zyg_r": self.fn}, em.p.target)
        return f"{em.ns.ref(h)}({', '.join(args + [em.tz(a) for a in st.expr.args])})"

    def _zyg_kind(self, kinds):
        from ..pullbacks.ckloop import PACKED_KIND, check_kinds
        r = self.fn
        check_kinds(list(kinds[3:3 + r.n]), list(kinds[3 + r.n:]), r.names, r.loc)
        return PACKED_KIND


class CkPart(Checkpointed):
    """Carried value ``k`` of a checkpointed loop, read from the packed vector:
    ``CkPart(k)(z, *carried_before)``."""

    def __init__(self, runner: Any):
        super().__init__(runner)
        self.__name__ = self.__qualname__ = f"checkpointed_range value {runner.k}"

    def primal_src(self, em, st, args) -> str:
        return _runner_call(em, st, args, self.fn)

    def tangent_src(self, em, st, args) -> str:
        """Linear in the packed vector: the same read-out of its tangent."""
        return _runner_call(em, st, [em.tz(st.expr.args[0])] + args[1:], self.fn)

    def _zyg_kind(self, kinds):
        from ..pullbacks.ckloop import part_kind
        return part_kind(kinds[1 + self.fn.k])


def _runner_call(em, st, args, runner) -> str:
    """A call of a checkpointed loop's run-time part from forward-mode code."""
    from ..pullbacks.recursion import call_helper
    h = call_helper(runner, [em.kind(a) for a in st.expr.args], em.kind(st.var), em.p.target,
                    record=False)
    return f"{em.ns.ref(h)}({', '.join(args)})"
