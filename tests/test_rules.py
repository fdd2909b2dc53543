"""Custom @zyg.adjoint rules, and the generic checker over every built-in rule."""
import math

import numpy as np
import pytest

import zyg
from zyg.rules import registry


def softclip(x):
    # written with try/except: zyg cannot transform it, so only the rule can make it work
    try:
        return math.tanh(x)
    except Exception:
        return 1.0


def _softclip_rule(x):
    y = softclip(x)

    def back(dy):
        # straight-through estimator: deliberately NOT the derivative of tanh
        return (dy * 1.0,)
    return y, back


@pytest.fixture(autouse=True)
def softclip_rule():
    # registered per test: conftest forgets user rules between tests
    zyg.adjoint(softclip)(_softclip_rule)
    yield


def uses_softclip(x):
    return 3.0 * softclip(x * x)


@pytest.mark.parametrize("target", ["python", "cpu"])
def test_custom_rule_is_used(target):
    g = zyg.grad(uses_softclip, target=target)
    x = 0.7
    # the rule says d softclip = 1, so the gradient is 3 * 2x, not 3 * (1 - tanh^2) * 2x
    assert g(x) == pytest.approx(6.0 * x, rel=1e-14)
    assert abs(g(x) - 6.0 * x * (1 - math.tanh(x * x) ** 2)) > 0.1


def test_custom_rule_compiles_under_numba():
    g = zyg.grad(uses_softclip, target="cpu")
    g(0.3)
    entry = g._zyg.cache[float]
    assert hasattr(entry, "py_func") or hasattr(getattr(entry, "compiled", None), "py_func")


def test_rule_with_general_forward_and_backward():
    def stable_softplus(x):
        return math.log1p(math.exp(-abs(x))) + max(x, 0.0)

    @zyg.adjoint(stable_softplus)
    def _(x):
        e = math.exp(-abs(x))
        y = math.log1p(e) + max(x, 0.0)

        def back(dy):
            s = 1.0 / (1.0 + e)
            if x >= 0:
                return (dy * s,)
            return (dy * e * s,)
        return y, back

    def loss(x):
        t = 0.0
        for i in range(3):
            t = t + stable_softplus(x * (i + 1))
        return t

    for target in ("python", "cpu"):
        g = zyg.grad(loss, target=target)
        for x in (-1.3, 0.4):
            ref = sum((i + 1) / (1 + math.exp(-x * (i + 1))) for i in range(3))
            assert g(x) == pytest.approx(ref, rel=1e-12)


# -- generic rule checker ------------------------------------------------------

CANDIDATES = [0.3, 0.7, 1.4, -0.45, 2.2, -1.6]


def _points(fn, nargs):
    out = []
    for i in range(len(CANDIDATES)):
        args = tuple(CANDIDATES[(i + k * 2) % len(CANDIDATES)] for k in range(nargs))
        try:
            with np.errstate(all="raise"):
                v = float(fn(*args))
        except (ValueError, ZeroDivisionError, FloatingPointError, OverflowError, TypeError):
            continue
        if math.isfinite(v):
            out.append(args)
    return out


def _check_rule(fn, args):
    """A rule's gradient against central finite differences, through zyg.grad (python)."""
    n = len(args)
    params = ", ".join(f"a{i}" for i in range(n))
    src = f"def probe({params}):\n    return fn({params})\n"
    import linecache
    name = f"<zyg-rulecheck-{id(fn)}-{n}>"
    linecache.cache[name] = (len(src), None, src.splitlines(True), name)
    ns = {"fn": fn}
    exec(compile(src, name, "exec"), ns)
    g = zyg.grad(ns["probe"], argnums=tuple(range(n)), target="python")(*args)
    conv = registry.lookup(fn).converted
    for i in range(n):
        h = 1e-6 * max(1.0, abs(args[i]))
        a, b = list(args), list(args)
        a[i] += h
        b[i] -= h
        ref = (float(fn(*a)) - float(fn(*b))) / (2 * h)
        if not conv.nonzero[i]:
            continue
        assert g[i] == pytest.approx(ref, rel=1e-6, abs=1e-8), (fn, args, i)


def _registered_scalar_rules():
    out = []
    for key, rule in registry.all_rules().items():
        if key not in registry._BUILTIN_KEYS:
            continue
        fn = rule.fn
        if fn in (zyg.stop_gradient,):
            continue
        out.append(rule)
    return out


RULES = _registered_scalar_rules()


@pytest.mark.parametrize("rule", RULES, ids=lambda r: repr(r))
def test_every_builtin_rule_against_finite_differences(rule):
    nargs = len(rule.converted.params)
    pts = _points(rule.fn, nargs)
    assert pts, f"{rule!r} has no sample point in its domain among the checker's candidates"
    for args in pts[:3]:
        # stay away from kinks (ties of min/max/abs at 0 are excluded by the candidates)
        _check_rule(rule.fn, args)


def test_rule_table_is_large():
    assert len(RULES) >= 60
