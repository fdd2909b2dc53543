"""Issue 13, last items: ``type(x)(v)`` casts, reductions of one number (``np.sum(x)`` of a
float), tuple axes of reductions, forward mode of ``np.clip`` and ``cho_factor``, and
structured-array records.

Every derivative is compared with central finite differences on both targets (reverse mode,
and forward mode ``zyg.jvp`` where the item asks for it); every refusal is a zyg error whose
message names the user's file and line and says what to write instead.
"""
from __future__ import annotations

import inspect
import math

import numpy as np
import pytest

import zyg
from conftest import TARGETS

H = 1e-6


def fd(f, x, h=H):
    """Central differences of a scalar ``f`` w.r.t. a float or an array ``x``."""
    if not isinstance(x, np.ndarray):
        s = h * max(1.0, abs(x))
        return (f(x + s) - f(x - s)) / (2 * s)
    g = np.zeros_like(x)
    for k in range(x.size):
        up, dn = x.copy(), x.copy()
        s = h * max(1.0, abs(x.flat[k]))
        up.flat[k] += s
        dn.flat[k] -= s
        g.flat[k] = (f(up) - f(dn)) / (2 * s)
    return g


def close(a, b, rtol=1e-6, atol=1e-8):
    np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)


def line_of(fn, text):
    """The file line of the first source line of ``fn`` that contains ``text``."""
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, s in enumerate(lines) if text in s)


_G = {}


def grad(f, argnums, target):
    key = (f, argnums, target)
    if key not in _G:
        _G[key] = zyg.grad(f, argnums, target=target)
    return _G[key]


# -- 1. type(x)(v) casts ------------------------------------------------------------------------

def cast_same(x, y):
    # a float cast of a product (the generic code of a numerical library)
    return type(x)(x * y) + math.sin(type(y)(x))


def cast_int(x, n):
    # type(n)(...) of an int is int(...): not differentiated, the result stays exact
    k = type(n)(x * 3.0)
    return x * k + x ** 2


def cast_complex(z, x):
    return abs(type(z)(x) * z) ** 2


def cast_array(a, x):
    return np.sum(a) * type(a)(x)


@pytest.mark.parametrize("target", TARGETS)
def test_type_cast_float(target):
    x, y = 0.7, -1.3
    gx, gy = grad(cast_same, (0, 1), target)(x, y)
    close(gx, fd(lambda t: cast_same(t, y), x))
    close(gy, fd(lambda t: cast_same(x, t), y))
    # a numpy scalar argument: type(x) is np.float64, the cast is float's
    gx2 = grad(cast_same, (0, 1), target)(np.float64(x), y)[0]
    close(gx2, gx, rtol=1e-14)


@pytest.mark.parametrize("target", TARGETS)
def test_type_cast_int(target):
    x = 0.9      # int(2.7) = 2, away from the jumps of int()
    g = grad(cast_int, 0, target)(x, 4)
    close(g, fd(lambda t: cast_int(t, 4), x))
    assert zyg.value_and_grad(cast_int, 0, target=target)(x, 4)[0] == pytest.approx(cast_int(x, 4))


@pytest.mark.parametrize("target", TARGETS)
def test_type_cast_complex(target):
    z, x = 0.3 - 0.8j, 1.1
    g = grad(cast_complex, 1, target)(z, x)
    close(g, fd(lambda t: cast_complex(z, t), x))


@pytest.mark.parametrize("target", TARGETS)
def test_type_cast_of_an_array_is_refused_at_its_line(target):
    with pytest.raises(zyg.ZygError) as e:
        zyg.grad(cast_array, 1, target=target)(np.ones(3), 0.5)
    msg = str(e.value)
    assert "type(x)(...) casts are supported when x is a number; here x is a 1-D array" in msg
    assert f"{__file__}\", line {line_of(cast_array, 'type(a)(x)')}" in msg
    assert "np.asarray(v, dtype=x.dtype)" in msg


def cast_two_args(x):
    return type(x)(x, 2.0)


def test_type_cast_with_two_arguments_is_refused():
    with pytest.raises(zyg.ZygError) as e:
        zyg.grad(cast_two_args)(0.5)
    msg = str(e.value)
    assert "supported as type(x)(v), with one argument" in msg
    assert f"line {line_of(cast_two_args, 'type(x)(x, 2.0)')}" in msg


@pytest.mark.parametrize("target", TARGETS)
def test_type_cast_jvp(target):
    x, y = 0.7, -1.3
    _, t = zyg.jvp(cast_same, (x, y), (1.0, 0.0), target=target)
    close(t, fd(lambda s: cast_same(s, y), x))


# -- 2. reductions of one number ----------------------------------------------------------------

def reduce_number(x, y):
    s = np.sum(x * y) + np.mean(x) * 2.0
    m = np.max(x * x) - np.min(y) * x
    return s * m + np.prod(x + y) ** 2


@pytest.mark.parametrize("target", TARGETS)
def test_reductions_of_a_number(target):
    x, y = 0.8, -1.7
    vg = zyg.value_and_grad(reduce_number, (0, 1), target=target)
    v, (gx, gy) = vg(x, y)
    assert v == pytest.approx(reduce_number(x, y), rel=1e-14)
    close(gx, fd(lambda t: reduce_number(t, y), x))
    close(gy, fd(lambda t: reduce_number(x, t), y))


@pytest.mark.parametrize("target", TARGETS)
def test_reductions_of_a_number_jvp(target):
    x, y = 0.8, -1.7
    _, t = zyg.jvp(reduce_number, (x, y), (0.4, -0.3), target=target)
    close(t, fd(lambda e: reduce_number(x + 0.4 * e, y - 0.3 * e), 0.0))


def reduce_mixed(a, x):
    # the same names on an array and on a number in one function
    return np.sum(a * x) + np.sum(x) * np.max(a) + np.mean(x * x)


@pytest.mark.parametrize("target", TARGETS)
def test_reductions_of_numbers_beside_arrays(target):
    a, x = np.array([0.3, -1.2, 2.1]), 0.6
    ga, gx = grad(reduce_mixed, (0, 1), target)(a, x)
    close(ga, fd(lambda t: reduce_mixed(t, x), a))
    close(gx, fd(lambda t: reduce_mixed(a, t), x))


# -- 4. forward mode of the scalar np.clip and of scipy.linalg.cho_factor ------------------------

def clip_number(x, lo, hi):
    return np.clip(x * x, lo, hi) * x + np.clip(x, -1.0, 0.5)


# x inside, below and above the bounds (x * x never at a bound); lo > hi where hi wins
CLIP_POINTS = [(0.7, 0.1, 0.9), (0.2, 0.3, 2.0), (1.3, 0.1, 0.9), (0.8, 1.0, 0.4)]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("point", CLIP_POINTS)
def test_clip_number_jvp_and_grad(target, point):
    x, lo, hi = point
    for k, tan in enumerate([(1.0, 0.0, 0.0), (0.0, 1.0, 0.0), (0.0, 0.0, 1.0)]):
        y, t = zyg.jvp(clip_number, point, tan, target=target)
        assert y == pytest.approx(clip_number(*point), rel=1e-14)
        ref = fd(lambda e: clip_number(*[p + e * d for p, d in zip(point, tan)]), 0.0)
        close(t, ref)
    g = grad(clip_number, (0, 1, 2), target)(*point)
    for k in range(3):
        close(g[k], fd(lambda e: clip_number(*[p + (e if j == k else 0.0) for j, p in enumerate(point)]),
                       0.0))


scipy_linalg = pytest.importorskip("scipy.linalg")


def cho_lower(a):
    c, low = scipy_linalg.cho_factor(a, lower=True)
    return c * 1.5


def cho_upper(a):
    c, low = scipy_linalg.cho_factor(a)
    return c + a


def cho_solve_all(a, b):
    f = scipy_linalg.cho_factor(a)
    return scipy_linalg.cho_solve(f, b)


A_SPD = np.array([[2.0, 0.3, -0.2], [0.4, 1.5, 0.1], [-0.1, 0.2, 1.2]])   # not symmetric on purpose
TA = np.array([[0.3, -0.7, 0.2], [0.5, 0.1, -0.4], [0.9, 0.6, 0.25]])


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("f", [cho_lower, cho_upper])
def test_cho_factor_jvp(target, f):
    y, t = zyg.jvp(f, (A_SPD,), (TA,), target=target)
    close(y, f(A_SPD), rtol=1e-12)
    h = 1e-6
    ref = (f(A_SPD + h * TA) - f(A_SPD - h * TA)) / (2 * h)
    close(t, ref)


@pytest.mark.parametrize("target", TARGETS)
def test_cho_factor_then_cho_solve_jvp(target):
    b = np.array([0.4, -1.1, 0.7])
    tb = np.array([0.2, 0.3, -0.5])
    y, t = zyg.jvp(cho_solve_all, (A_SPD, b), (TA, tb), target=target)
    close(y, cho_solve_all(A_SPD, b), rtol=1e-12)
    h = 1e-6
    ref = (cho_solve_all(A_SPD + h * TA, b + h * tb) - cho_solve_all(A_SPD - h * TA, b - h * tb)) / (2 * h)
    close(t, ref)


# -- 5. structured-array records read as data ---------------------------------------------------

REC_T = np.dtype([("x1", "f8"), ("x2", "f8"), ("n", "i8")])


def record_model(p, t):
    # parameters packed in a record, the way scientific code passes them
    return p["x1"] * math.exp(-p["x2"] * t) + p["n"] * t ** 2


def structured_model(p, w):
    return np.sum(p["x1"] * np.sin(w * p["x2"])) * w


def make_record():
    r = np.zeros(1, dtype=REC_T)[0]
    r["x1"], r["x2"], r["n"] = 1.7, 0.4, 3
    return r


def make_structured():
    s = np.zeros(4, dtype=REC_T)
    s["x1"] = [0.3, -1.2, 0.8, 2.0]
    s["x2"] = [1.1, 0.5, -0.7, 0.9]
    return s


@pytest.mark.parametrize("target", TARGETS)
def test_record_fields_are_read_as_data(target):
    p, t = make_record(), 0.6
    v, g = zyg.value_and_grad(record_model, 1, target=target)(p, t)
    assert v == pytest.approx(record_model(p, t), rel=1e-14)
    close(g, fd(lambda s: record_model(p, s), t))


@pytest.mark.parametrize("target", TARGETS)
def test_structured_array_fields_are_read_as_data(target):
    s, w = make_structured(), 1.3
    g = grad(structured_model, 1, target)(s, w)
    close(g, fd(lambda u: structured_model(s, u), w))
    # another record of the same dtype: the values are arguments, not constants
    s2 = make_structured()
    s2["x1"] *= 2.0
    close(grad(structured_model, 1, target)(s2, w), fd(lambda u: structured_model(s2, u), w))


@pytest.mark.parametrize("target", TARGETS)
def test_record_jvp(target):
    p, t = make_record(), 0.6
    _, tt = zyg.jvp(record_model, (p, t), (None, 1.0), target=target)
    close(tt, fd(lambda s: record_model(p, s), t))


@pytest.mark.parametrize("target", TARGETS)
def test_gradient_with_respect_to_a_record_is_refused(target):
    with pytest.raises(zyg.ZygError) as e:
        zyg.grad(record_model, (0, 1), target=target)(make_record(), 0.6)
    msg = str(e.value)
    assert "argument 0 of record_model is a numpy structured record" in msg
    assert "does not differentiate with respect to them" in msg
    assert f"{__file__}\", line {record_model.__code__.co_firstlineno}" in msg
    assert "pass the fields to differentiate as separate arrays" in msg


# -- 3. tuple axes of reductions ----------------------------------------------------------------

from arraycheck import check_array_rule  # noqa: E402
from rulecheck import check_rule  # noqa: E402

RNG = np.random.default_rng(13)
A2 = RNG.uniform(0.5, 2.0, (3, 4))
A3 = RNG.uniform(0.5, 2.0, (2, 3, 4))      # distinct entries: no ties in max/min

TUPLE_AXIS_CASES = [
    (np.sum, A2, (0, 1), False), (np.sum, A3, (0, 1), False), (np.sum, A3, (0, 2), True),
    (np.sum, A3, (-1, 0), False), (np.mean, A3, (0, 2), False), (np.mean, A3, (1, 2), True),
    (np.mean, A2, (0, 1), True), (np.max, A3, (1, 2), False), (np.max, A3, (0, 1), True),
    (np.min, A3, (0, 2), False), (np.max, A2, (0, 1), False), (np.sum, A3, (1,), False),
    (np.prod, A2, (0, 1), False),
]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("case", TUPLE_AXIS_CASES, ids=lambda c: f"{c[0].__name__}{c[2]}{c[3]}")
def test_tuple_axis_rule_checker(target, case):
    fn, a, axes, keep = case
    kw = {"axis": axes, "keepdims": True} if keep else {"axis": axes}
    check_array_rule(fn, [a.copy()], kw, target=target)


def tuple_axes_user(a, w):
    # the way a user writes it: positional tuple, a loss over the result
    s = np.sum(a * w, (0, 2))
    m = np.max(a, axis=(1, 2), keepdims=True)
    return np.sum(s ** 2) + np.sum(m * a)


@pytest.mark.parametrize("target", TARGETS)
def test_tuple_axes_in_user_code(target):
    w = 0.7
    ga, gw = grad(tuple_axes_user, (0, 1), target)(A3, w)
    close(ga, fd(lambda t: tuple_axes_user(t, w), A3))
    close(gw, fd(lambda t: tuple_axes_user(A3, t), w))


@pytest.mark.parametrize("target", TARGETS)
def test_tuple_axes_jvp(target):
    t = RNG.uniform(-1.0, 1.0, A3.shape)
    _, tt = zyg.jvp(tuple_axes_user, (A3, 0.7), (t, 0.0), target=target)
    close(tt, fd(lambda e: tuple_axes_user(A3 + e * t, 0.7), 0.0))


def test_scalar_rules_touched_here_pass_the_rule_checker():
    # the scalar np.clip rule was rewritten in closed form (forward mode reads it)
    for point in CLIP_POINTS:
        for target in TARGETS:
            check_rule(np.clip, *point, target=target)


def max_keep(a):
    return np.max(a, axis=1, keepdims=True)


def min_keep_all(a):
    return np.min(a, keepdims=True) * a


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("f", [max_keep, min_keep_all])
def test_keepdims_reduction_jvp_has_the_result_shape(target, f):
    # the tangent of np.max(a, axis=1, keepdims=True) had the shape of the reduction without
    # the kept axis ((3,) for (3, 1)): a wrong tangent broadcast later, or an error
    t = RNG.uniform(-1.0, 1.0, A2.shape)
    y, ty = zyg.jvp(f, (A2,), (t,), target=target)
    assert ty.shape == f(A2).shape
    close(ty, (f(A2 + H * t) - f(A2 - H * t)) / (2 * H))
