"""Every supported language construct, differentiated on both targets and compared
with central finite differences at several points (never at kinks only, never at 0 only).

Each case is (function, list of argument tuples, argnums).  The compiled gradients are
cached per session in ``conftest.cached`` so numba compiles each function once.
"""
from __future__ import annotations

import math

import numba
import numpy as np
import pytest

import zyg

from conftest import assert_grad_matches, cached, fd_grad

SCALE = 2.5          # a module global number: a constant to zyg
OFFSET = -1          # an int global
FLAG = True


# --- arithmetic ------------------------------------------------------------------

def arith(x, y):
    return x + y * x - y / x + x ** 2 - 3.0 * y ** 3 + (x - y) / (1.0 + y * y)


def unary_minus(x):
    return -x * -(x + 1.0) + (-x) ** 3


def pow_float_exp(x, y):
    return x ** y + 2.0 ** x + x ** 0.5


def pow_int_exp(x):
    return x ** 3 - x ** -2 + x ** 0


def negative_constant_power(x):
    # (-0.5) ** 2 is 0.25; -0.5 ** 2 is -0.25 (a negative constant needs parentheses)
    return x * (-0.5) ** 2 + (-1.5) ** 3 * x * x - 2.0 ** 2 * x + (-x) ** 2


def floordiv_mod(x):
    # floordiv is piecewise constant, mod has slope 1 between jumps
    return x % 1.5 + (x // 0.7) * x + x % -2.0


def mod_both(x, y):
    return x % y


def abs_min_max(x, y):
    return abs(x) * min(x, y) + max(x, y, 0.3) - min(x * x, y, 2.0, x + y)


def comparisons_as_numbers(x):
    # a comparison result is a bool; arithmetic with it is constant w.r.t. x
    return (x > 1.0) * x + (x <= 1.0) * x * x


def float_int_mix(x, n):
    return x * n + n ** 2 + x ** n


def constant_return(x):
    return 3.0


def ignores_argument(x, y):
    return y * y


def math_funcs(x):
    return (math.sin(x) + math.cos(x) * math.tan(x) + math.exp(x) - math.log(x)
            + math.sqrt(x) + math.sinh(x) - math.cosh(x) + math.tanh(x) + math.expm1(x)
            + math.log1p(x) + math.log2(x) + math.log10(x) + math.erf(x) + math.erfc(x)
            + math.fabs(x - 3.0) + math.asinh(x) + math.atan(x))


def math_funcs_unit(x):
    # domain (-1, 1)
    return math.asin(x) + math.acos(x) * 2.0 + math.atanh(x)


def math_funcs_gt1(x):
    return math.acosh(x) + math.log(x) * x


def math_binary(x, y):
    return math.hypot(x, y) + math.atan2(x, y) + math.pow(x, y) + math.atan2(y, x - 3.0)


def math_constants(x):
    return math.pi * x * x + math.e ** x + SCALE * math.sin(math.tau * x) + OFFSET * x


def np_funcs(x):
    return (np.sin(x) + np.cos(x) + np.tan(x) + np.exp(x) + np.log(x) + np.sqrt(x)
            + np.arctan(x) + np.arcsinh(x) + np.square(x) + np.cbrt(x) + np.tanh(x)
            + np.log1p(x) + np.expm1(x) + np.log2(x) + np.log10(x) + np.sinh(x) + np.cosh(x)
            + np.exp2(x) + np.reciprocal(x) + np.negative(x) + np.absolute(x - 5.0))


def np_unit(x):
    return np.arcsin(x) + np.arccos(x) + np.arctanh(x)


def np_binary(x, y):
    return (np.maximum(x, y) * np.minimum(x, 2.0 * y) + np.logaddexp(x, y) + np.hypot(x, y)
            + np.arctan2(x, y) + np.power(x, y) + np.fmax(x, 0.1) + np.fmin(y, 3.0))


def cbrt_negative(x):
    return np.cbrt(x) * x


# --- assignment ------------------------------------------------------------------

def reassign(x):
    y = x * 2.0
    y = y * y
    z = y + x
    y = z * x
    x = x + 1.0          # reassigning the argument itself
    x = x * x
    return x + y + z


def reassign_args(x, y):
    x, y = y * x, x - y
    x = math.sin(x)
    y = y * x
    return x + y


def augassign(x):
    y = 1.0
    y += x
    y *= x
    y -= 0.5 * x
    y /= 1.0 + x * x
    y **= 2
    x += y
    x *= 3.0
    return x + y


def swap_once(x, y):
    a, b = x, y * y
    a, b = b, a
    return a * 3.0 + b


def annotated(x):
    y: float = x * x
    return y


# --- branches ----------------------------------------------------------------------

def if_else(x):
    if x > 1.0:
        y = x * x
    else:
        y = -x
    return y * 3.0


def if_no_else(x):
    y = x
    if x < 0.0:
        y = y * y
    return y + x


def elif_chain(x):
    if x < -1.0:
        r = x ** 3
    elif x < 0.0:
        r = math.sin(x)
    elif x < 1.0:
        r = math.exp(x)
    elif x < 2.0:
        r = x * x * x
    else:
        r = 7.0 * x
    return r * x


def nested_if(x, y):
    if x > 0.0:
        if y > 0.0:
            r = x * y
        else:
            r = x - y * y
    else:
        if y > x:
            r = math.cos(x * y)
        else:
            r = x * x
    return r


def chained_comparison(x, y):
    if 0.0 < x < y <= 3.0:
        return x * y
    return x + y


def chained_comparison_value(x):
    b = -1.0 < x < 1.0
    return b * x + x * x


def ternary(x):
    return x * x if x > 0.5 else math.sin(x)


def ternary_nested(x, y):
    return (x * y if x > y else y - x) + (math.exp(x) if x < 0.0 else (x if y > 1.0 else y * x))


def return_in_branch(x):
    if x > 2.0:
        return x * x
    if x > 1.0:
        return 3.0 * x
    return math.exp(x)


def if_on_int(x, n):
    if n > 2:
        x = x * x
    return x * n


def if_on_bool(x, flag):
    if flag:
        return x * x
    return -x


def if_const_global(x):
    if FLAG:
        return x * SCALE
    return x


# --- boolean operators ---------------------------------------------------------------

def and_shortcircuit(x, d):
    # x / d must not be evaluated when d == 0
    if d != 0.0 and x / d > 1.0:
        return x * x
    return 3.0 * x


def or_shortcircuit(x, d):
    if d == 0.0 or x / d < 1.0:
        return math.sin(x)
    return x * d


def and_value(x, y):
    # Python value semantics: `a and b` is a if a is falsy else b
    return (x > 0.0 and y) + 1.0 * x


def or_value(x, y):
    r = (x - 1.0 > 0.0) or y * x
    return r * x


def or_value_float(x, y):
    # both operands are floats: `x or y` is x unless x == 0.0
    return (x or y) * x


def and_value_float(x, y):
    return (x and y) * x


def not_op(x, y):
    if not (x > y):
        return x * y
    return x - y


def not_chain(x):
    if not (x > 0.0 and x < 1.0) or x == 0.5:
        return x * x
    return math.log(x)


def mixed_bool(x, y, z):
    if (x > 0.0 and y > 0.0) or (z > 0.0 and not x > 1.0):
        return x * y * z
    return x + y + z


# --- loops ---------------------------------------------------------------------------

def for_range(x, n):
    s = 0.0
    for i in range(n):
        s = s + x ** i / (i + 1)
    return s


def for_range_start_stop(x):
    s = x
    for i in range(2, 6):
        s = s * x + i
    return s


def for_negative_step(x):
    s = 1.0
    for i in range(10, 0, -3):
        s = s * x + i * x
    return s


def for_runtime_step(x, step):
    s = 0.5
    for i in range(-7, 8, step):
        s = s * math.cos(x) + i
    return s


def for_runtime_step_plain(x, start, stop, step):
    s = 1.0
    for i in range(start, stop, step):
        s = s * x + 0.1 * i
    return s


def for_loop_var_used_after(x):
    i = 0
    for i in range(4):
        x = x * 1.5 + i
    return x * i


def while_counted(x):
    i = 0
    s = 0.0
    while i < 5:
        s = s + math.sin(x * i)
        i = i + 1
    return s


def while_data_dependent(x):
    y = 1.0
    while y < 10.0:
        y = y * x
    return y


def while_data_dependent_sum(x):
    # the trip count depends on x and the accumulated value depends on every iteration
    y = x
    s = 0.0
    while y < 100.0:
        s = s + math.sqrt(y)
        y = y * x + 1.0
    return s + y


def while_halving(x):
    n = 0
    while x > 1.0:
        x = x / 2.0
        n += 1
    return x * n + x


def for_break(x):
    s = 1.0
    for i in range(100):
        s = s * x
        if s > 50.0:
            break
    return s


def for_continue(x):
    s = 0.0
    for i in range(8):
        if i % 3 == 1:
            continue
        s = s + x * i + s * 0.1
    return s


def while_break_continue(x):
    i = 0
    s = 0.0
    while True:
        i += 1
        if i > 20:
            break
        if i % 2 == 0:
            continue
        s = s * x + 1.0
        if s > 30.0:
            break
    return s


def nested_loops(x):
    s = 0.0
    for i in range(4):
        t = x
        for j in range(i + 1):
            t = t * x + j
        s = s + t
    return s


def nested_break_continue(x):
    s = 0.0
    for i in range(6):
        if i == 1:
            continue
        j = 0
        while j < 5:
            j += 1
            if j == 2:
                continue
            s = s + x * j
            if s > 8.0 * x:
                break
        if s > 40.0:
            break
        s = s * 0.9
    return s


def return_in_nested_loop(x):
    s = x
    for i in range(5):
        for j in range(5):
            s = s * 1.1 + x
            if s > 20.0:
                return s * x
    return -s


def return_in_while(x):
    y = x
    while True:
        y = y * x
        if y > 5.0:
            return y + x
        if y < -5.0:
            return y - x


def return_first_iteration(x):
    for i in range(3):
        return x * x * (i + 1)
    return 0.0


def swap_loop(x, n):
    # this bug shipped in Zygote: the parallel assignment must use the old values
    a = 1.0
    b = 2.0
    for i in range(n):
        a, b = b, a * x
    return a + 3.0 * b


def rotate3_loop(x, n):
    a = x
    b = 2.0
    c = 3.0
    for i in range(n):
        a, b, c = b * x, c, a + x
    return a + 2.0 * b + 5.0 * c


def swap_while(x, y):
    i = 0
    while i < 4:
        x, y = y, x * y
        i += 1
    return x + y


def loop_carried_many(x):
    a = x
    b = 1.0
    c = 0.0
    for i in range(6):
        c = c + a * b
        b = b * 0.5 + a
        a = math.sin(a) + x
    return a + b + c


def loop_zero_trips(x, n):
    s = x
    for i in range(n):
        s = s * s
    return s * 2.0


def loop_with_branch(x):
    s = 0.0
    for i in range(10):
        if s > 3.0:
            s = s - x
        elif i % 2 == 0:
            s = s + x * x
        else:
            s = s * x
    return s


def loop_float_counter(x):
    t = 0.0
    s = 0.0
    while t < 1.0:
        s = s + x * t
        t = t + 0.25
    return s


def range_of_int_of_x(x):
    # int(x) is non-differentiable, the trip count depends on x
    s = 0.0
    for i in range(int(x * 3.0)):
        s = s + x * i
    return s


def defined_in_loop_used_after(x, n):
    for i in range(n):
        t = x * i + 1.0
    return t * x


def int_on_one_path(x):
    if x > 1.0:
        return 1
    return x * x


def long_loop(x, n):
    # long enough that the tape buffers grow; called again with short loops afterwards
    s = 0.0
    k = 0
    while k < n:
        s = s + math.sin(s + x) * 0.5
        k += 1
    return s


# --- callables -----------------------------------------------------------------------

@numba.njit
def jitted(x, y):
    s = 0.0
    for i in range(3):
        s = s + x * y + math.sin(x) * i
    return s


lam = lambda x: math.sin(x) * x + x ** 3  # noqa: E731


def counter_after_nested_loop(x, n):
    # the inner loop's counter is used after the loop, inside an outer loop: it must
    # not be recomputed from a trip count that belongs to another outer iteration
    s = 0.0
    for i in range(n):
        k = 0
        while k < i + 2:
            s += x * k
            k += 1
        s += x * x * k
    return s


CASES = [
    (counter_after_nested_loop, [(0.7, 4), (-1.3, 3)], 0),
    (arith, [(1.3, 0.7), (-2.1, 1.9), (0.4, -0.3)], (0, 1)),
    (unary_minus, [(0.3,), (-1.7,), (2.2,)], 0),
    (pow_float_exp, [(1.3, 0.7), (2.1, -1.9), (0.4, 2.5)], (0, 1)),
    (pow_int_exp, [(1.3,), (-2.1,), (0.4,)], 0),
    (negative_constant_power, [(0.3,), (-1.7,), (2.2,)], 0),
    (floordiv_mod, [(0.3,), (1.1,), (-2.2,), (3.3,)], 0),
    (mod_both, [(3.3, 1.4), (-2.2, 0.9), (5.1, -1.3)], (0, 1)),
    (abs_min_max, [(1.3, 0.7), (-2.1, 1.9), (0.4, -0.3), (0.9, 2.5)], (0, 1)),
    (comparisons_as_numbers, [(0.3,), (1.7,), (-1.2,)], 0),
    (float_int_mix, [(1.3, 3), (-0.7, 2), (0.5, 0)], (0, 1)),
    (constant_return, [(0.3,), (-1.7,)], 0),
    (ignores_argument, [(0.3, 1.2), (-1.7, 0.4)], (0, 1)),
    (math_funcs, [(0.3,), (0.8,), (1.7,), (2.9,)], 0),
    (math_funcs_unit, [(0.3,), (-0.6,), (0.85,)], 0),
    (math_funcs_gt1, [(1.3,), (2.6,), (7.0,)], 0),
    (math_binary, [(1.3, 0.7), (2.1, 1.9), (0.4, -0.3)], (0, 1)),
    (math_constants, [(0.3,), (-1.7,), (1.1,)], 0),
    (np_funcs, [(0.3,), (0.8,), (1.7,), (2.9,)], 0),
    (np_unit, [(0.3,), (-0.6,), (0.85,)], 0),
    (np_binary, [(1.3, 0.7), (2.1, 1.9), (0.4, 1.3)], (0, 1)),
    (cbrt_negative, [(-2.0,), (-0.3,), (1.7,)], 0),
    (reassign, [(0.3,), (-1.7,), (1.1,)], 0),
    (reassign_args, [(0.3, 1.2), (-1.7, 0.4), (1.1, -0.8)], (0, 1)),
    (augassign, [(0.3,), (-1.7,), (1.1,)], 0),
    (swap_once, [(0.3, 1.2), (-1.7, 0.4)], (0, 1)),
    (annotated, [(0.3,), (-1.7,)], 0),
    (if_else, [(0.3,), (1.7,), (-2.2,)], 0),
    (if_no_else, [(0.3,), (-1.7,)], 0),
    (elif_chain, [(-1.5,), (-0.5,), (0.5,), (1.5,), (2.5,)], 0),
    (nested_if, [(1.3, 0.7), (1.3, -0.7), (-1.3, 0.7), (-1.3, -2.7)], (0, 1)),
    (chained_comparison, [(1.3, 2.7), (1.3, 0.7), (-1.3, 0.7), (1.3, 3.5)], (0, 1)),
    (chained_comparison_value, [(0.3,), (-1.7,), (1.5,)], 0),
    (ternary, [(0.3,), (1.7,), (-1.2,)], 0),
    (ternary_nested, [(1.3, 0.7), (-1.3, 0.7), (0.3, 1.5), (0.3, 0.9)], (0, 1)),
    (return_in_branch, [(0.3,), (1.7,), (2.5,), (-1.0,)], 0),
    (if_on_int, [(0.3, 3), (1.7, 1), (-2.0, 5)], (0, 1)),
    (if_on_bool, [(0.3, True), (1.7, False)], (0, 1)),
    (if_const_global, [(0.3,), (-1.7,)], 0),
    # d == 0 is a branch switch for d (x / d jumps), so only x is differentiated there
    (and_shortcircuit, [(2.5, 0.0), (-0.5, 0.0)], 0),
    (and_shortcircuit, [(2.5, 1.0), (0.5, 1.0), (-2.5, -1.5)], (0, 1)),
    (or_shortcircuit, [(2.5, 0.0), (-0.5, 0.0)], 0),
    (or_shortcircuit, [(2.5, 1.0), (0.5, 1.0), (-2.5, -1.5)], (0, 1)),
    (and_value, [(0.5, 1.5), (-0.5, 1.5), (2.0, -3.0)], (0, 1)),
    (or_value, [(0.5, 1.5), (1.5, 1.5), (2.0, -3.0)], (0, 1)),
    (or_value_float, [(0.5, 1.5), (-1.5, 0.7)], (0, 1)),
    (and_value_float, [(0.5, 1.5), (-1.5, 0.7)], (0, 1)),
    (not_op, [(0.5, 1.5), (1.5, 0.5)], (0, 1)),
    (not_chain, [(0.3,), (1.7,), (-1.2,)], 0),
    (mixed_bool, [(0.5, 1.5, 2.0), (-0.5, 1.5, 2.0), (1.5, -1.5, 2.0), (0.5, -1.5, -2.0)], (0, 1, 2)),
    (for_range, [(0.3, 5), (1.7, 3), (-1.2, 6)], (0, 1)),
    (for_range_start_stop, [(0.3,), (1.7,), (-1.2,)], 0),
    (for_negative_step, [(0.3,), (1.7,), (-1.2,)], 0),
    (for_runtime_step, [(0.3, 2), (1.7, 3), (-1.2, 1), (0.9, 5)], (0, 1)),
    (for_runtime_step_plain, [(0.3, 0, 7, 2), (1.7, 9, -2, -3), (-1.2, 5, 5, 1), (0.8, 3, 12, 4),
                              (1.1, 4, 0, -1), (1.3, 0, 3, -1)], 0),
    (for_loop_var_used_after, [(0.3,), (-1.7,)], 0),
    (while_counted, [(0.3,), (1.7,), (-1.2,)], 0),
    (while_data_dependent, [(1.7,), (1.3,), (2.9,), (11.0,), (1.05,)], 0),
    (while_data_dependent_sum, [(1.7,), (1.3,), (3.9,), (150.0,)], 0),
    (while_halving, [(0.3,), (1.7,), (9.5,), (100.3,)], 0),
    (for_break, [(0.3,), (1.7,), (3.1,), (1.02,)], 0),
    (for_continue, [(0.3,), (1.7,), (-1.2,)], 0),
    (while_break_continue, [(0.3,), (1.7,), (2.2,), (-1.2,)], 0),
    (nested_loops, [(0.3,), (1.7,), (-1.2,)], 0),
    (nested_break_continue, [(0.3,), (1.7,), (2.9,), (-1.2,)], 0),
    (return_in_nested_loop, [(0.3,), (1.7,), (2.9,), (-1.2,), (0.01,)], 0),
    (return_in_while, [(1.3,), (2.9,), (-1.7,), (-3.1,)], 0),
    (return_first_iteration, [(0.3,), (-1.7,)], 0),
    (swap_loop, [(1.3, 5), (0.7, 4), (-1.1, 7), (2.0, 0), (1.5, 1)], (0, 1)),
    (rotate3_loop, [(1.3, 5), (0.7, 4), (-1.1, 7), (2.0, 0), (1.5, 1), (0.9, 2), (1.2, 3)], (0, 1)),
    (swap_while, [(1.3, 0.7), (-0.7, 1.4)], (0, 1)),
    (loop_carried_many, [(0.3,), (1.7,), (-1.2,)], 0),
    (loop_zero_trips, [(0.3, 0), (1.7, 2), (-1.2, 3)], (0, 1)),
    (loop_with_branch, [(0.3,), (1.7,), (-1.2,), (0.9,)], 0),
    (loop_float_counter, [(0.3,), (-1.7,)], 0),
    (range_of_int_of_x, [(2.3,), (0.2,), (1.9,)], 0),
    (defined_in_loop_used_after, [(1.3, 4), (-0.7, 1)], (0, 1)),
    (int_on_one_path, [(0.5,), (1.5,), (-2.0,)], 0),
    (long_loop, [(0.3, 20000), (0.3, 3), (-0.7, 5000), (1.1, 1)], (0, 1)),
    (jitted, [(0.3, 1.2), (-1.7, 0.4)], (0, 1)),
    (lam, [(0.3,), (-1.7,), (2.2,)], 0),
]


@pytest.mark.parametrize("f, points, argnums", CASES, ids=[c[0].__name__ for c in CASES])
def test_construct(f, points, argnums, target):
    for args in points:
        assert_grad_matches(f, args, argnums, targets=(target,))


MULTI_ARG_CASES = [c for c in CASES if not isinstance(c[2], int) and len(c[2]) > 1]


@pytest.mark.parametrize("f, points, argnums", MULTI_ARG_CASES, ids=[c[0].__name__ for c in MULTI_ARG_CASES])
def test_each_argnum_alone(f, points, argnums, target):
    """A single int argnum gives a bare number, equal to the tuple entry."""
    nums = argnums
    args = points[0]
    full = cached("grad", f, argnums, target)(*args)
    for k, i in enumerate(nums):
        g = cached("grad", f, i, target)(*args)
        assert (g is None) == (full[k] is None)
        if g is not None:
            assert g == pytest.approx(full[k], rel=1e-12, abs=1e-300)


# --- API surface ---------------------------------------------------------------------

def test_swap_loop_exact(target):
    # f = 2x^2 + 3x^3 after 5 iterations: f' = 4x + 9x^2
    g = cached("grad", swap_loop, 0, target)
    for x in (1.3, -0.4, 2.0):
        assert g(x, 5) == pytest.approx(4 * x + 9 * x * x, rel=1e-13)


def test_rotate3_loop_exact(target):
    # one step: (a, b, c) -> (b x, c, a + x); starting (x, 2, 3)
    def ref(x, n):
        a, b, c = x, 2.0, 3.0
        da, db, dc = 1.0, 0.0, 0.0
        for _ in range(n):
            a, b, c, da, db, dc = b * x, c, a + x, db * x + b, dc, da + 1.0
        return da + 2.0 * db + 5.0 * dc
    g = cached("grad", rotate3_loop, 0, target)
    for x in (1.3, -0.4):
        for n in range(0, 8):
            assert g(x, n) == pytest.approx(ref(x, n), rel=1e-13)


def test_while_data_dependent_exact(target):
    # y = x^k with k the first power >= 10
    g = cached("grad", while_data_dependent, 0, target)
    for x in (1.7, 1.3, 2.9, 11.0):
        k = 1
        while x ** k < 10.0:
            k += 1
        assert g(x) == pytest.approx(k * x ** (k - 1), rel=1e-12)


def test_int_and_bool_args_get_none(target):
    assert cached("grad", float_int_mix, 1, target)(1.3, 3) is None
    assert cached("grad", if_on_bool, 1, target)(1.3, True) is None
    g = cached("grad", float_int_mix, (0, 1), target)(1.3, 3)
    assert g[1] is None and g[0] == pytest.approx(fd_grad(float_int_mix, (1.3, 3)), rel=1e-6)
    # an int passed where a float is expected is also not differentiated
    assert cached("grad", arith, 0, target)(2, 0.5) is None


def test_int_value_for_float_param_recompiles(target):
    """A second type signature gets its own specialisation."""
    g = cached("grad", arith, (0, 1), target)
    gi = g(2, 0.5)
    gf = g(2.0, 0.5)
    assert gi[0] is None
    assert gf[0] == pytest.approx(fd_grad(arith, (2.0, 0.5), 0), rel=1e-6)
    assert gi[1] == pytest.approx(gf[1], rel=1e-12)


def test_tuple_argnums_order_and_negative(target):
    args = (1.3, 0.7)
    g01 = zyg.grad(arith, (0, 1), target=target)(*args)
    g10 = zyg.grad(arith, (1, 0), target=target)(*args)
    gneg = zyg.grad(arith, -1, target=target)(*args)
    assert isinstance(g01, tuple) and len(g01) == 2
    assert g10 == (g01[1], g01[0])
    assert gneg == g01[1]
    assert zyg.grad(arith, (1,), target=target)(*args) == (g01[1],)


def test_value_and_grad(target):
    vg = zyg.value_and_grad(while_data_dependent_sum, target=target)
    for x in (1.7, 3.9):
        v, g = vg(x)
        assert v == while_data_dependent_sum(x)
        assert g == pytest.approx(fd_grad(while_data_dependent_sum, (x,)), rel=1e-6)
    v, g = zyg.value_and_grad(float_int_mix, (0, 1), target=target)(1.3, 3)
    assert v == float_int_mix(1.3, 3)
    assert g[1] is None and g[0] == pytest.approx(fd_grad(float_int_mix, (1.3, 3)), rel=1e-6)
    v, g = zyg.value_and_grad(float_int_mix, 1, target=target)(1.3, 3)
    assert v == float_int_mix(1.3, 3) and g is None


def test_numba_jitted_function(target):
    g = cached("grad", jitted, (0, 1), target)(0.3, 1.2)
    e = fd_grad(jitted.py_func, (0.3, 1.2), (0, 1))
    assert g == pytest.approx(e, rel=1e-6)


def test_lambda(target):
    g = zyg.grad(lambda x: x * math.exp(x), target=target)
    for x in (0.3, -1.1):
        assert g(x) == pytest.approx((1 + x) * math.exp(x), rel=1e-13)


def test_bare_decorator():
    @zyg.grad
    def f(x):
        r = 1.0
        for i in range(3):
            r = r * math.sin(x)
        return r

    for x in (0.5, -1.2):
        assert f(x) == pytest.approx(3 * math.sin(x) ** 2 * math.cos(x), rel=1e-13)


def test_decorator_with_options():
    @zyg.grad(argnums=1, target="python")
    def f(x, y):
        return x * y * y

    assert f(0.5, 3.0) == pytest.approx(3.0, rel=1e-15)

    @zyg.value_and_grad(argnums=(0, 1))
    def h(x, y):
        return x * y * y

    v, (gx, gy) = h(0.5, 3.0)
    assert (v, gx, gy) == (4.5, 9.0, 3.0)


def test_closure_constant(target):
    k = 1.7

    def f(x):
        return k * x * x

    assert zyg.grad(f, target=target)(0.4) == pytest.approx(2 * 1.7 * 0.4, rel=1e-14)


def test_stop_gradient(target):
    def f(x):
        return zyg.stop_gradient(x * x) * x

    for x in (0.7, -1.3):
        assert zyg.grad(f, target=target)(x) == pytest.approx(x * x, rel=1e-14)


def test_float_subclass_and_numpy_scalars(target):
    g = cached("grad", arith, (0, 1), target)
    ref = g(1.3, 0.7)
    got = g(np.float64(1.3), np.float64(0.7))
    assert got == pytest.approx(ref, rel=1e-14)


def test_wrong_arity():
    with pytest.raises(TypeError):
        zyg.grad(arith, target="python")(1.0)


def test_argnums_out_of_range():
    with pytest.raises(ValueError):
        zyg.grad(arith, 5, target="python")(1.0, 2.0)


def test_unknown_target():
    with pytest.raises(ValueError, match="target"):
        zyg.grad(arith, target="gpu")(1.0, 2.0)


def empty_loop_with_branchy_body(x, y):
    # found by the random-program property test (CI seed 310203453653485556951178045981079811218):
    # numba 0.68 could not type dx in a 'while True' dispatch loop left only by 'break'
    a = (math.sin(0.5) + (x + 0.5))
    b = (a + a)
    for i1 in range(0):
        a = 0.5 * ((0.5 if not (a < a < 0.5) else (x if a < a < 0.5 and b <= y else a)))
        y = 0.5 * (math.atan((b + x)))
    return ((y if a > y else 1.3) - math.sin(0.25))


def test_dispatch_loop_regression_found_by_the_property_test(target):
    assert_grad_matches(empty_loop_with_branchy_body, (0.4763309753691657, 0.01), (0, 1),
                        targets=(target,))
