"""Forward mode: ``zyg.jvp`` of every construct supported so far.

The cases are the ones the reverse-mode tests use (scalar constructs, arrays with
mutation, calls, closures, tuples and namedtuples).  Each tangent output is compared
with a central finite difference along the same random direction.  Every case runs on
the python target, and a representative subset on the cpu target too (numba compiles
each one, and the suite must stay fast).
"""
import math

import numpy as np
import pytest

import zyg
import test_arrays as ta
import test_calls as tc
import test_constructs as tcs

RNG = np.random.default_rng(11)
H = 1e-6


def _leaves(v):
    if isinstance(v, tuple):
        return [x for e in v for x in _leaves(e)]
    return [v]


def direction(args):
    """A random tangent with the structure of args (None for ints and bools)."""
    def one(x):
        if isinstance(x, tuple):
            items = [one(e) for e in x]
            return type(x)(*items) if hasattr(x, "_fields") else tuple(items)
        if isinstance(x, np.ndarray):
            return RNG.standard_normal(x.shape) if x.dtype.kind == "f" else None
        if isinstance(x, float):
            return float(RNG.standard_normal())
        return None
    return tuple(one(x) for x in args)


def shifted(args, tans, s):
    def one(x, t):
        if isinstance(x, tuple):
            items = [one(a, b) for a, b in zip(x, t if t is not None else [None] * len(x))]
            return type(x)(*items) if hasattr(x, "_fields") else tuple(items)
        if t is None:
            return x.copy() if isinstance(x, np.ndarray) else x
        return x + s * t
    return tuple(one(x, t) for x, t in zip(args, tans))


def fd_jvp(f, args, tans):
    up, dn = f(*shifted(args, tans, H)), f(*shifted(args, tans, -H))
    if isinstance(up, tuple):
        return tuple((np.asarray(u) - np.asarray(d)) / (2 * H) for u, d in zip(_leaves(up), _leaves(dn)))
    return (np.asarray(up) - np.asarray(dn)) / (2 * H)


def grad_dot(f, args, tans):
    """<grad f, v> by reverse mode (an independent transform, checked against finite
    differences by the reverse-mode tests) for a scalar function."""
    nums = [i for i, x in enumerate(args) if any(isinstance(l, (float, np.ndarray)) and
                                                 (not isinstance(l, np.ndarray) or l.dtype.kind == "f")
                                                 for l in _leaves(x))]
    g = zyg.grad(f, argnums=tuple(nums), target="python")(*shifted(args, tans, 0.0))
    total = 0.0
    for i, gi in zip(nums, g):
        for a, b in zip(_leaves(gi), _leaves(tans[i])):
            if a is not None and b is not None:
                total += float(np.sum(np.asarray(a) * np.asarray(b)))
    return total


def check_jvp(f, args, target):
    tans = direction(args)
    fresh = shifted(args, tans, 0.0)
    want_y = f(*shifted(args, tans, 0.0))
    y, ty = zyg.jvp(f, fresh, tans, target=target)
    for a, b in zip(fresh, shifted(args, tans, 0.0)):
        if isinstance(a, np.ndarray):
            np.testing.assert_array_equal(a, b, err_msg="jvp changed an input array")
    if isinstance(want_y, tuple) or isinstance(want_y, np.ndarray):
        # tuple or array results: central differences along the direction
        want = fd_jvp(f, args, tans)
        assert type(y) is type(want_y)
        for g, w in zip(_leaves(ty), _leaves(want)):
            np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-7, err_msg=f"{target}: {f.__name__}")
    else:
        # scalar results: against the reverse-mode gradient along the direction (a random
        # direction may cross a branch boundary within a finite-difference step)
        np.testing.assert_allclose(y, want_y, rtol=1e-12)
        np.testing.assert_allclose(ty, grad_dot(f, args, tans), rtol=1e-9, atol=1e-12,
                                   err_msg=f"{target}: {f.__name__}")


def _param_cases(module):
    """(f, args) of every ``@pytest.mark.parametrize("f,args,argnums", ...)`` in a module."""
    out = []
    for name in sorted(dir(module)):
        obj = getattr(module, name)
        for m in getattr(obj, "pytestmark", []):
            if m.name == "parametrize" and m.args[0].replace(" ", "") == "f,args,argnums":
                out += [(c[0], c[1]) for c in m.args[1]]
    return out


SCALAR = [(f, pts[0]) for f, pts, _ in tcs.CASES]
ARRAYS = _param_cases(ta)
CALLS = [c for c in _param_cases(tc)] + [
    (tc.chain, (0.7, -0.4)), (tc.closure_in_loop, (0.8, 6)), (tc.fold_with_lambda, (np.linspace(0.2, 1.4, 7), 0.6)),
    (tc.higher_order, (0.3, 0.8)), (tc.uses_jitted, (0.9, 1.7)), (tc.keyword_calls, (1.1, -0.6)),
    (tc.two_types, (np.array([0.3, -0.2, 1.1]), 0.7)), (tc.nested_tuple_arg, ((1.3, (0.7, 3)), 2.0)),
    (tc.rk4, (tc.Osc(1.0, 0.2), 2.0, 0.1, 0.05, 40)), (tc.polar, (1.2, 0.5)), (tc.state_out, (np.array([0.5, -1.5, 2.0]), 1.5)),
]
ALL = SCALAR + ARRAYS + CALLS
CPU = ALL[::4] + [c for c in ARRAYS if c[0].__name__ in ("heat_inplace_arg", "particles", "dp_softmin_path")] \
    + CALLS[-4:]


def _id(c):
    return c[0].__name__


@pytest.mark.parametrize("case", ALL, ids=_id)
def test_jvp_python(case):
    if case[0] is tc.chain:
        from callees import register_rules
        register_rules()
    check_jvp(case[0], case[1], "python")


@pytest.mark.parametrize("case", CPU, ids=_id)
def test_jvp_cpu(case):
    if case[0] is tc.chain:
        from callees import register_rules
        register_rules()
    check_jvp(case[0], case[1], "cpu")


def test_jvp_agrees_with_the_gradient():
    # <grad f, v> = jvp(f, x, v) for a scalar function (two independent transforms)
    x, v = np.linspace(0.1, 0.9, 8), RNG.standard_normal(8)
    g = zyg.grad(ta.heat, argnums=(0, 1), target="python")(x, 0.2, 30)
    _, t = zyg.jvp(ta.heat, (x, 0.2, 30), (v, 0.3, None), target="python")
    assert t == pytest.approx(np.dot(g[0], v) + 0.3 * g[1], rel=1e-12)


def test_jvp_errors():
    with pytest.raises(zyg.TypeMismatch, match="2 primals but 1 tangents"):
        zyg.jvp(tc.scale2, (1.0, 2.0), (1.0,))
    with pytest.raises(zyg.TypeMismatch, match="tangent has shape"):
        zyg.jvp(lambda a: np.sum(a), (np.ones(3),), (np.ones(4),), target="python")


# -- zyg.check_grads over the same cases ---------------------------------------------------------
# Complements check_jvp: per-element Richardson finite differences for forward mode (one unit
# tangent per input element) and reverse mode, and the dot-product test <J v, w> = <v, J^T w>
# between jvp and pullback, with respect to the arguments each case's own test
# differentiates (points where an argument sits on a branch switch are only differentiated
# in the others).

def _param_cases_argnums(module):
    out = []
    for name in sorted(dir(module)):
        obj = getattr(module, name)
        for m in getattr(obj, "pytestmark", []):
            if m.name == "parametrize" and m.args[0].replace(" ", "") == "f,args,argnums":
                out += [(c[0], c[1], c[2]) for c in m.args[1]]
    return out


def _checkable(args, argnums):
    nums = [argnums] if isinstance(argnums, int) else list(argnums)
    return tuple(i % len(args) for i in nums
                 if isinstance(args[i], float) or
                 isinstance(args[i], np.ndarray) and args[i].dtype.kind == "f")


CHECKED = [(f, pts[0], _checkable(pts[0], nums)) for f, pts, nums in tcs.CASES] + \
    [(f, args, _checkable(args, nums)) for f, args, nums in
     _param_cases_argnums(ta) + _param_cases_argnums(tc)]
CHECKED = [c for c in CHECKED if c[2]]


@pytest.mark.parametrize("case", CHECKED, ids=_id)
def test_check_grads_python(case):
    f, args, nums = case
    if f is tc.chain:
        from callees import register_rules
        register_rules()
    zyg.check_grads(f, args, argnums=nums, target="python")


@pytest.mark.parametrize("case", [c for c in CHECKED if c[0].__name__ in
                                  ("heat_inplace_arg", "particles", "two_types")], ids=_id)
def test_check_grads_cpu(case):
    f, args, nums = case
    zyg.check_grads(f, args, argnums=nums, target="cpu")
