"""Error messages point at the user's file and line and say what to do."""
import math

import numba
import pytest

import zyg

HERE = __file__


def line_of(fn, text):
    import inspect
    lines, start = inspect.getsourcelines(fn)
    for k, ln in enumerate(lines):
        if text in ln:
            return start + k
    raise AssertionError(text)


def uses_try(x):
    try:
        y = x * 2
    except Exception:
        y = 0.0
    return y


def uses_with(x):
    with open("f") as fh:
        pass
    return x


def uses_yield(x):
    yield x


G = 1.0


def writes_global(x):
    global G
    G = x
    return x


def inner_lambda(x):
    f = lambda t: t * 2   # noqa: E731
    return f(x)


def uses_list(x):
    a = [x, x]
    return x


def uses_subscript(x):
    return x[0]


@pytest.mark.parametrize("fn, marker, words", [
    (uses_try, "try:", "'Try' statements are not supported"),
    (uses_with, "with open", "'With' statements are not supported"),
    (writes_global, "global G", "'Global' statements are not supported"),
    (inner_lambda, "lambda t", "'Lambda' expressions are not supported"),
    (uses_list, "[x, x]", "'List' expressions are not supported"),
    (uses_subscript, "x[0]", "'Subscript' expressions are not supported"),
], ids=lambda v: getattr(v, "__name__", None))
def test_unsupported_syntax_points_at_user_line(fn, marker, words):
    with pytest.raises(zyg.UnsupportedSyntax) as ei:
        zyg.grad(fn, target="python")(1.0)
    e = ei.value
    assert e.filename == HERE
    assert e.lineno == line_of(fn, marker)
    msg = str(e)
    assert words in msg
    assert f'File "{HERE}", line {e.lineno}' in msg
    assert "^" in msg and e.hint and "hint:" in msg


def test_generator_is_rejected():
    with pytest.raises(zyg.UnsupportedSyntax, match="Yield"):
        zyg.grad(uses_yield, target="python")(1.0)


def no_rule(x):
    return math.lgamma(x) * x


def test_no_adjoint_names_function_line_and_suggests_a_rule():
    with pytest.raises(zyg.NoAdjoint) as ei:
        zyg.grad(no_rule)(1.5)
    e = ei.value
    assert e.lineno == line_of(no_rule, "lgamma")
    assert "math.lgamma" in str(e)
    assert "@zyg.adjoint(math.lgamma)" in str(e)


def test_no_rule_needed_when_inactive():
    def f(x, n):
        return x * math.lgamma(n)   # n is an int: lgamma's result is not differentiated
    assert zyg.grad(f)(2.0, 4) == pytest.approx(math.lgamma(4))


def test_non_scalar_argument():
    import numpy as np
    with pytest.raises(zyg.TypeMismatch, match="argument 0 of .* is a ndarray"):
        zyg.grad(lambda x: x * 2.0)(np.ones(3))


@numba.njit
def not_typable(x):
    return x + "a"


def calls_untypable(x):
    k = not_typable(3)
    return x * 2.0


def test_numba_failure_becomes_compile_error_with_user_line():
    zyg.nondifferentiable(not_typable)
    with pytest.raises(zyg.CompileError) as ei:
        zyg.grad(calls_untypable)(1.0)
    e = ei.value
    assert e.filename == HERE
    assert e.lineno == line_of(calls_untypable, "not_typable(3)")
    assert "generated code:" in str(e) and "target='python'" in str(e)


def test_missing_return_is_reported():
    def f(x):
        if x > 0:
            return x
    with pytest.raises(zyg.TypeMismatch, match="return"):
        zyg.grad(f)(1.0)


def test_nested_grad_is_rejected_not_silently_wrong():
    def f(x):
        return x * x * x
    with pytest.raises(zyg.UnsupportedSyntax, match="nested derivatives"):
        zyg.grad(zyg.grad(f))(2.0)
