"""Calls: user functions (here and imported), numba dispatchers, closures, lambdas,
higher-order helpers, keyword/default/star arguments, tuples and namedtuples.

Every gradient is checked on both targets against central finite differences of
every float leaf of every argument (tuples and namedtuples perturbed leaf by leaf).
"""
import math
import os
import textwrap
from collections import namedtuple

import numpy as np
import sys

import pytest

import zyg
from zyg.api import ssa_of
from callees import Lib, jitted_poly, outer_level, register_rules, rounded, weighted

TARGETS = ("python", "cpu")
H = 1e-6


# -- finite differences over nested arguments ---------------------------------------
def _leaves(v):
    if isinstance(v, tuple):
        return [x for e in v for x in _leaves(e)]
    return [v]


def _rebuild(template, vals, pos=0):
    if isinstance(template, tuple):
        items = []
        for e in template:
            x, pos = _rebuild(e, vals, pos)
            items.append(x)
        return (type(template)(*items) if hasattr(template, "_fields") else tuple(items)), pos
    return vals[pos], pos + 1


def _fresh(args):
    return [a.copy() if isinstance(a, np.ndarray) else a for a in args]


def fd(f, args, i):
    """Central differences of f w.r.t. every float leaf of args[i], shaped like args[i]
    (every evaluation gets fresh copies of the arrays: f may write into them)."""
    leaves = _leaves(args[i])
    out = []
    for j, x in enumerate(leaves):
        if isinstance(x, np.ndarray):
            g = np.zeros(x.shape)
            for idx in np.ndindex(x.shape):
                vals = []
                for s in (1, -1):
                    lv = [y.copy() if isinstance(y, np.ndarray) else y for y in leaves]
                    lv[j][idx] += s * H
                    a = _fresh(args)
                    a[i] = _rebuild(args[i], lv)[0]
                    vals.append(f(*a))
                g[idx] = (vals[0] - vals[1]) / (2 * H)
            out.append(g)
        elif isinstance(x, float):
            step = H * max(1.0, abs(x))
            vals = []
            for s in (1, -1):
                lv = list(leaves)
                lv[j] = x + s * step
                a = _fresh(args)
                a[i] = _rebuild(args[i], lv)[0]
                vals.append(f(*a))
            out.append((vals[0] - vals[1]) / (2 * step))
        else:
            out.append(None)
    return _rebuild(args[i], out)[0]


def assert_close_tree(got, want, what, rtol=1e-6, atol=1e-8):
    if isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want), (what, got, want)
        if hasattr(want, "_fields"):
            assert type(got) is type(want), f"{what}: gradient of a namedtuple is a {type(got).__name__}"
        for k, (g, w) in enumerate(zip(got, want)):
            assert_close_tree(g, w, f"{what}[{k}]", rtol, atol)
    elif want is None:
        assert got is None, (what, got)
    else:
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=what)


def check(f, args, argnums=0, rtol=1e-6, atol=1e-8):
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    want = [fd(f, args, i) for i in nums]
    for target in TARGETS:
        val, g = zyg.value_and_grad(f, argnums=argnums, target=target)(*args)
        np.testing.assert_allclose(val, f(*_fresh(args)), rtol=1e-12, err_msg=target)
        gs = (g,) if isinstance(argnums, int) else g
        for i, gi, wi in zip(nums, gs, want):
            assert_close_tree(gi, wi, f"{target}: {f.__name__} d/d arg {i}", rtol, atol)


# -- a 3-level call chain whose innermost function has a custom rule ------------------
def chain(x, y):
    return outer_level(x, y) + math.cos(x)


def test_three_level_chain_with_a_rule_at_the_bottom():
    register_rules()
    check(chain, (0.7, -0.4), (0, 1))
    # the callees were transformed (inlined); the innermost one was called through its rule
    text = str(ssa_of(chain))
    assert "soft" in text and "middle" not in text


# -- closures --------------------------------------------------------------------------
def closure_in_loop(x, n):
    c = math.sin(x)                    # captured, and it depends on the input

    def step(v):
        return v * c + x

    v = 1.0
    for i in range(n):
        v = step(v) / (1.0 + i)
        c = c * 0.9                    # late binding: the closure sees the new c
    return v


def test_closure_capturing_an_input_dependent_value_in_a_loop():
    check(closure_in_loop, (0.8, 6), 0)


def fold(f, init, a):
    acc = init
    for i in range(a.shape[0]):
        acc = f(acc, a[i])
    return acc


def fold_with_lambda(a, w):
    return fold(lambda acc, v: acc * 0.9 + w * v * v, 0.0, a)


def test_user_fold_over_an_array_with_a_lambda():
    check(fold_with_lambda, (np.linspace(0.2, 1.4, 7), 0.6), (0, 1))


def apply_n(f, x, n):
    for i in range(n):
        x = f(x)
    return x


def higher_order(x, a):
    g = lambda t: t * a + math.sin(t)   # noqa: E731
    return apply_n(g, x, 4) + apply_n(Lib.sq, x, 2) + Lib.norm2(x, a)


def test_higher_order_helper_and_gradient_of_captured_variables():
    check(higher_order, (0.3, 0.8), (0, 1))


# -- numba dispatchers, other modules, globals ------------------------------------------
def uses_jitted(x, c):
    return jitted_poly(x, c) * 2.0 + weighted(np.array([x, c, x * c]))


def test_njit_callee_and_imported_callee_reading_globals():
    check(uses_jitted, (0.9, 1.7), (0, 1))


# -- keywords, defaults, * of a tuple ---------------------------------------------------
def kw_helper(a, b=2.0, *, c=0.5):
    return a * b + c * a * a


def keyword_calls(x, y):
    t = (x, y)
    return kw_helper(x) + kw_helper(y, b=x) + kw_helper(*t, c=y) + kw_helper(b=y, a=x)


def test_keywords_defaults_and_star_unpacking():
    check(keyword_calls, (1.1, -0.6), (0, 1))


def star_of_argument(p, s):
    return kw_helper(*p) * s


def test_star_unpacking_of_a_tuple_argument():
    check(star_of_argument, ((0.4, 1.3), 2.0), (0, 1))


# -- one callee, two call sites with different argument types -------------------------
def scale2(v):
    return v * 2.0 + v * v


def two_types(a, x):
    return np.sum(scale2(a)) + scale2(x)


def test_same_callee_specialised_per_call_site():
    check(two_types, (np.array([0.3, -0.2, 1.1]), 0.7), (0, 1))


# -- non-differentiable user functions and stop_gradient --------------------------------
def uses_rounded(x):
    return x * rounded(x) + zyg.stop_gradient(x * x)


def test_user_function_declared_nondifferentiable():
    zyg.nondifferentiable(rounded)
    for target in TARGETS:
        g = zyg.grad(uses_rounded, target=target)(0.73)
        assert g == pytest.approx(rounded(0.73), rel=1e-14)


# -- tuples and namedtuples ------------------------------------------------------------
def nested_tuple_arg(p, y):
    a, (b, n) = p
    return a * b * y + p[1][0] ** n


def test_gradient_of_a_nested_tuple_argument_is_a_tuple():
    check(nested_tuple_arg, ((1.3, (0.7, 3)), 2.0), (0, 1))
    g = zyg.grad(nested_tuple_arg, target="python")((1.3, (0.7, 3)), 2.0)
    assert g[1][1] is None          # the int entry has no gradient


Osc = namedtuple("Osc", "x v")


def deriv(s, k, damp):
    return Osc(s.v, -k * s.x - damp * s.v)


def axpy(a, s, t):
    return Osc(s.x + a * t.x, s.v + a * t.v)


def rk4(s0, k, damp, dt, n):
    s = s0
    for i in range(n):
        k1 = deriv(s, k, damp)
        k2 = deriv(axpy(dt / 2, s, k1), k, damp)
        k3 = deriv(axpy(dt / 2, s, k2), k, damp)
        k4 = deriv(axpy(dt, s, k3), k, damp)
        s = s._replace(x=s.x + dt / 6 * (k1.x + 2 * k2.x + 2 * k3.x + k4.x),
                       v=s.v + dt / 6 * (k1.v + 2 * k2.v + 2 * k3.v + k4.v))
    return s.x ** 2 + 0.5 * s.v ** 2


def test_namedtuple_state_in_an_rk4_integrator():
    check(rk4, (Osc(1.0, 0.2), 2.0, 0.1, 0.05, 40), (0, 1, 2))


def polar(x, y):
    return (math.hypot(x, y), (math.atan2(y, x), x * y))


@pytest.mark.parametrize("target", TARGETS)
def test_pullback_of_a_tuple_return_takes_a_tuple_dy(target):
    x, y = 1.2, 0.5
    out, back = zyg.pullback(polar, x, y, target=target)
    assert out == polar(x, y)
    r = math.hypot(x, y)
    dx, dy = back((1.0, (None, 2.0)))      # None: a zero cotangent for that entry
    assert dx == pytest.approx(x / r + 2.0 * y, rel=1e-14)
    assert dy == pytest.approx(y / r + 2.0 * x, rel=1e-14)
    dx, dy = back((0.0, (3.0, 0.0)))
    assert dx == pytest.approx(-3.0 * y / r ** 2, rel=1e-14)
    assert dy == pytest.approx(3.0 * x / r ** 2, rel=1e-14)
    with pytest.raises(zyg.TypeMismatch, match="tuple of 2 entries"):
        back((1.0, 2.0, 3.0))


def state_out(a, k):
    return Osc(np.sum(a * a) * k, a * k)


@pytest.mark.parametrize("target", TARGETS)
def test_pullback_of_a_namedtuple_with_an_array(target):
    a = np.array([0.5, -1.5, 2.0])
    out, back = zyg.pullback(state_out, a, 1.5, target=target)
    assert isinstance(out, Osc)
    np.testing.assert_allclose(out.v, a * 1.5)
    w = np.array([1.0, 0.0, -2.0])
    da, dk = back(Osc(2.0, w))
    np.testing.assert_allclose(da, 2.0 * 2 * a * 1.5 + w * 1.5, rtol=1e-14)
    assert dk == pytest.approx(2.0 * np.sum(a * a) + np.dot(w, a), rel=1e-14)


def test_grad_of_a_tuple_returning_function_is_a_type_error():
    with pytest.raises(zyg.TypeMismatch, match="returns a tuple"):
        zyg.grad(polar, target="python")(1.0, 2.0)


# -- errors of the new failure modes ----------------------------------------------------
# -- recursion: direct, tree, mutual, an FFT over a complex array -------------------------
def power(x, n):
    if n == 0:
        return 1.0
    return x * power(x, n - 1)


def tree(x, depth):
    # two recursive calls per level, a recursion tree of 2**depth leaves
    if depth == 0:
        return math.sin(x)
    return tree(x * 0.9, depth - 1) * x + tree(x + 0.1, depth - 1)


def even_steps(x, n):
    if n == 0:
        return x
    return odd_steps(x * 1.1, n - 1)


def odd_steps(x, n):
    if n == 0:
        return -x * x
    return even_steps(math.sin(x), n - 1)


def depth_of(n):
    # recursive and never differentiated: its calls must not leave pullbacks behind
    if n <= 1:
        return 0
    return 1 + depth_of(n // 2)


def recursion_in_a_loop(x, n):
    s = 0.0
    for i in range(n):
        s += power(x + 0.1 * i, depth_of(i + 2) + 1) + float(depth_of(i + 1))
    return s


def fft(x):
    n = x.shape[0]
    if n == 1:
        return x.copy()
    even = fft(x[0::2])
    odd = fft(x[1::2])
    k = np.arange(n // 2)
    t = np.exp(-2j * np.pi * k / n) * odd
    return np.concatenate((even + t, even - t))


def spectrum_loss(x):
    X = fft(x)
    return np.sum(np.abs(X) ** 2 * np.arange(X.shape[0]))


@pytest.mark.parametrize("f, args", [
    (power, (1.3, 6)), (tree, (0.7, 4)), (even_steps, (0.7, 5)), (recursion_in_a_loop, (0.6, 5)),
], ids=lambda v: getattr(v, "__name__", None))
def test_recursion(f, args):
    from zyg.nested import recursion
    check(f, args, 0)
    assert recursion.CURRENT.get() is None


@pytest.mark.parametrize("target", TARGETS)
def test_recursive_fft_of_a_complex_array(target):
    from zyg.nested import recursion
    x = np.exp(1j * np.linspace(0.1, 2.0, 16)) * np.linspace(0.5, 1.5, 16)
    g = zyg.grad(spectrum_loss, target=target)(x)
    np.testing.assert_allclose(np.fft.fft(x), fft(x), rtol=1e-12, atol=1e-12)
    # PyTorch's convention (docs/complex.md): dL/d(re) + i dL/d(im)
    want = np.zeros(16, complex)
    for k in range(16):
        e = np.zeros(16)
        e[k] = 1e-6
        want[k] = ((spectrum_loss(x + e) - spectrum_loss(x - e)) / 2e-6
                   + 1j * (spectrum_loss(x + 1j * e) - spectrum_loss(x - 1j * e)) / 2e-6)
    np.testing.assert_allclose(g, want, rtol=1e-6, atol=1e-6 * np.max(np.abs(want)))
    assert recursion.CURRENT.get() is None


def test_deep_recursion(tmp_path):
    # 2000 levels: more than Python's default recursion limit allows frames for
    from numba.core import config
    # compiled recursion (pullbacks/native.py) makes no calls through C, so CPython 3.12's
    # fixed C recursion limit (which capped the run-time path at a few hundred levels) does
    # not apply: 2,000 levels on every version
    if int(config.OPT) == 0:
        # the suite compiles at numba's level 0 (conftest.py), whose C frames are larger
        # (1,790 levels fill 6.5 of 8 MiB and zyg's guard raises RecursionError): the depth
        # users get is checked at numba's default level, in a process of its own
        import inspect
        import subprocess
        src = tmp_path / "deep.py"
        src.write_text("import zyg\n\n" + inspect.getsource(power) + textwrap.dedent("""
            for target in ("python", "cpu"):
                g = zyg.grad(power, target=target)(1.0001, 2000)
                assert abs(g - 2000 * 1.0001 ** 1999) <= 1e-12 * abs(g), (target, g)
            print("deep ok")
            """))
        env = {k: v for k, v in os.environ.items() if k != "NUMBA_OPT"}
        r = subprocess.run([sys.executable, str(src)], capture_output=True, text=True, env=env,
                           timeout=600)
        assert r.returncode == 0 and "deep ok" in r.stdout, r.stdout + r.stderr
        return
    for target in TARGETS:
        assert zyg.grad(power, target=target)(1.0001, 2000) == pytest.approx(2000 * 1.0001 ** 1999,
                                                                             rel=1e-12)


def nested_recursive_closure(x):
    def down(t, n):
        return t if n == 0 else down(t * 1.5, n - 1)
    return down(x, 3)


def test_recursive_nested_function_is_reported_at_the_call():
    with pytest.raises(zyg.UnsupportedSyntax, match="recursive call of the nested function 'down'") as ei:
        zyg.grad(nested_recursive_closure, target="python")(1.0)
    assert ei.value.lineno == nested_recursive_closure.__code__.co_firstlineno + 2


def no_such_field(s):
    return s.x + s.w


def test_missing_namedtuple_field_is_reported_at_the_line():
    with pytest.raises(zyg.TypeMismatch, match="Osc has no field 'w'") as ei:
        zyg.grad(no_such_field, target="python")(Osc(1.0, 2.0))
    assert ei.value.lineno == no_such_field.__code__.co_firstlineno + 1


# -- functions passed to the differentiated function itself -----------------------------
def wavy(t):
    return t * math.sin(t)


def test_function_arguments_are_inlined_and_get_no_gradient():
    args = (wavy, 0.7, 3)
    want = fd(lambda x: apply_n(wavy, x, 3), (0.7,), 0)
    for target in TARGETS:
        assert zyg.grad(apply_n, argnums=1, target=target)(*args) == pytest.approx(want, rel=1e-6)
        val, (gf, gx) = zyg.value_and_grad(apply_n, argnums=(0, 1), target=target)(*args)
        assert gf is None and gx == pytest.approx(want, rel=1e-6)
        assert val == apply_n(*args)
        y, back = zyg.pullback(apply_n, math.sin, 0.5, 2, target=target)
        assert back(1.0) == (None, pytest.approx(math.cos(math.sin(0.5)) * math.cos(0.5), rel=1e-14), None)


# -- callees with their own control flow, mutation through calls, nested closures -------
def find_root(c, x0):
    # a callee with its own loop, break and early returns
    x = x0
    for it in range(50):
        fx = x * x - c
        if abs(fx) < 1e-14:
            return x
        x = x - fx / (2.0 * x)
        if x < 0:
            break
    return x


def caller_loop(c):
    s = 0.0
    for k in range(3):
        r = find_root(c + k, 1.0)
        if r > 1.5:
            s += r
            continue
        s -= r * r
    return s


def writes_into(a, v, i):
    a[i] = a[i] * v
    a[i + 1] += v


def mutating_callee(a, v):
    b = a.copy()
    for i in range(a.shape[0] - 1):
        writes_into(b, v, i)
    writes_into(a, v, 0)            # the caller's array, rewound by the backward pass
    return np.sum(b * b) + np.sum(a)


def nested_closures(x, y):
    def outer(t):
        def inner(u):
            return u * x + t
        return inner(t * y) + inner(x)
    acc = 0.0
    for i in range(3):
        f = lambda z, w=2.0: z * w + acc   # noqa: E731  (reads acc at each call)
        acc = acc + outer(x) * f(y)
    return acc


def closure_redefined_in_loop(x):
    s = 0.0
    for i in range(4):
        k = x * (i + 1)

        def g(u):
            return u * k
        s = s + g(s + 1.0)
    return s


@pytest.mark.parametrize("f, args, argnums", [
    (caller_loop, (2.0,), 0),
    (mutating_callee, (np.array([0.5, 1.5, -0.7, 2.0]), 1.3), (0, 1)),
    (nested_closures, (0.7, 1.2), (0, 1)),
    (closure_redefined_in_loop, (0.9,), 0),
], ids=lambda v: getattr(v, "__name__", None))
def test_callee_control_flow_mutation_and_nested_closures(f, args, argnums):
    before = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    check(f, args, argnums)
    for a, b in zip(args, before):
        if isinstance(a, np.ndarray):
            np.testing.assert_array_equal(a, b)    # gradient calls leave arrays unchanged


def two_definitions(x):
    if x > 0:
        def g(u):
            return u
    else:
        def g(u):
            return -u
    return g(x)


def test_a_function_defined_twice_is_an_error():
    with pytest.raises(zyg.UnsupportedSyntax, match="'g' is defined more than once") as ei:
        zyg.grad(two_definitions, target="python")(1.0)
    assert ei.value.lineno == two_definitions.__code__.co_firstlineno + 5
