"""The rule registry: custom adjoints (``@zyg.adjoint``) and non-differentiable functions.

A rule for ``fn`` is a Python function with ``fn``'s positional parameters that
computes the primal result and returns it together with a ``back`` closure::

    @zyg.adjoint(my_norm)
    def _(x):
        r = my_norm(x)
        def back(dr):
            return (dr * x / r,)
        return r, back

zyg never calls this function at run time: it closure-converts it (see
``zyg/pullbacks/closure.py``) so that the forward part is inlined into the
primal and ``back`` into the adjoint.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Tuple

from ..caches import invalidate
from .closure import convert_rule
from ..ssa import hooks


class Rule:
    """A registered custom adjoint for the primal function ``fn``."""

    def __init__(self, fn: Any, rule_fn: Callable, samples: Optional[list] = None):
        self.fn = fn
        self.rule_fn = rule_fn
        self.samples = samples or []
        self._converted = None
        # complex operands (docs/complex.md): ``complex`` is the rule used when an
        # operand or the result is complex (None: this rule itself); a built-in rule
        # with ``real_only`` set has no complex form (zyg reports it)
        self.complex: Optional["Rule"] = None
        self.real_only = False

    @property
    def converted(self):
        """The closure-converted form (parsed lazily, once)."""
        if self._converted is None:
            self._converted = convert_rule(self)
        return self._converted

    def __repr__(self) -> str:
        from ..ssa.ir import callee_name
        return f"<zyg rule for {callee_name(self.fn)}>"


_RULES: Dict[Any, Rule] = {}
_NONDIFF: Dict[Any, bool] = {}
_BUILTIN_KEYS: set = set()
# the built-in state, saved when the built-in phase ends, restored by reset_user_rules
_BUILTIN_RULES: Dict[Any, Rule] = {}
_BUILTIN_NONDIFF: Dict[Any, bool] = {}
_builtin_phase = True


def _key(fn: Any) -> Any:
    fn = getattr(fn, "py_func", fn)   # a numba dispatcher and its function share rules
    try:
        hash(fn)
        return fn
    except TypeError:
        return id(fn)


def adjoint(fn: Any, *, samples: Optional[list] = None) -> Callable[[Callable], Callable]:
    """Register a custom reverse-mode rule for ``fn`` (decorator factory).

    ``samples`` optionally lists argument tuples at which a rule checker may
    test the rule (kept on the :class:`Rule`).
    """
    def register(rule_fn: Callable) -> Callable:
        k = _key(fn)
        _RULES[k] = Rule(fn, rule_fn, samples)
        _NONDIFF.pop(k, None)
        if _builtin_phase:
            _BUILTIN_KEYS.add(k)
        invalidate()
        return rule_fn
    return register


def nondifferentiable(fn: Any) -> Any:
    """Declare ``fn`` non-differentiable: its result never carries a gradient."""
    k = _key(fn)
    _NONDIFF[k] = True
    _RULES.pop(k, None)
    if _builtin_phase:
        _BUILTIN_KEYS.add(k)
    else:
        invalidate()
    return fn


def declare_builtin_nondifferentiable(fn: Any) -> Any:
    """Declare a function zyg generates itself (a raiser, an ``is None`` test)
    non-differentiable for good: it survives :func:`reset_user_rules`, and no cache is
    cleared (nothing compiled can refer to a function that did not exist)."""
    k = _key(fn)
    _NONDIFF[k] = True
    _BUILTIN_NONDIFF[k] = True
    _BUILTIN_KEYS.add(k)
    return fn


def lookup(fn: Any) -> Optional[Rule]:
    """The rule registered for ``fn``, or None."""
    try:
        return _RULES.get(_key(fn))
    except TypeError:
        return None


def for_complex(rule: Rule) -> Optional[Rule]:
    """The rule to use for a call with a complex operand or result: the complex
    variant of a built-in rule, the rule itself when it needs none (user rules are
    taken to follow zyg's convention), None when it has no complex form."""
    if rule.complex is not None:
        return rule.complex
    return None if rule.real_only else rule


def complex_adjoint(fn: Any) -> Callable[[Callable], Callable]:
    """Register the complex variant of the (already registered) built-in rule of ``fn``."""
    def register(rule_fn: Callable) -> Callable:
        base = _RULES[_key(fn)]
        base.complex = Rule(fn, rule_fn)
        base.real_only = False
        return rule_fn
    return register


def is_nondifferentiable(fn: Any) -> bool:
    try:
        return _NONDIFF.get(_key(fn), False)
    except TypeError:
        return False


def all_rules() -> Dict[Any, Rule]:
    return dict(_RULES)


def reset_user_rules() -> None:
    """Forget every rule registered by users, restoring built-in rules they
    overrode or declared non-differentiable (tests call this between cases)."""
    if _builtin_phase:
        return
    changed = _RULES != _BUILTIN_RULES or _NONDIFF != _BUILTIN_NONDIFF
    _RULES.clear()
    _RULES.update(_BUILTIN_RULES)
    _NONDIFF.clear()
    _NONDIFF.update(_BUILTIN_NONDIFF)
    if changed:
        invalidate()


def end_builtin_phase() -> None:
    global _builtin_phase
    _builtin_phase = False
    _BUILTIN_RULES.clear()
    _BUILTIN_RULES.update(_RULES)
    _BUILTIN_NONDIFF.clear()
    _BUILTIN_NONDIFF.update(_NONDIFF)


# the front end: callees with a rule are never inlined; the functions it generates are
# non-differentiable
hooks.KNOWN_CALLEES.append(lambda fn: lookup(fn) is not None or is_nondifferentiable(fn))
hooks.on_generated_nondifferentiable(declare_builtin_nondifferentiable)
