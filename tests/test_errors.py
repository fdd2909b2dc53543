"""Error messages point at the user's file and line and say what to do."""
import linecache
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
    with open("f") as fh:  # noqa: F841
        pass
    return x


def uses_yield(x):
    yield x


G = 1.0


def writes_global(x):
    global G
    G = x
    return x


def takes_star(*xs):
    return xs[0]


def calls_star_callee(x):
    return takes_star(x)


def function_as_value(x):
    f = lambda t: t * 2   # noqa: E731
    return f + 1.0


def uses_list(x):
    a = [x, x]
    a[0] = 2.0 * x
    return x


def uses_subscript(x):
    return x[0]


def for_over_list(x):
    t = (x, x)
    for v in t:
        x = x * v
    return x


def range_step_zero(x):
    for i in range(0, 4, 0):
        x = x * 2.0
    return x


def is_comparison(x):
    if x is math.pi:
        return 0.0
    return x


def string_constant(x):
    return x * "abc"


def calls_local(x):
    g = x
    return g(x)


def local_attribute(x):
    return x.size      # (x.real of a number is supported: docs/complex.md)


def star_args(*xs):
    return 1.0


def kwonly(x, **k):
    return x


def two_args(a, b):
    return a * b


def unexpected_keyword(x):
    return two_args(x, c=1.0)


def missing_argument(x):
    return two_args(x)


def unpack_call(x):
    a, b = divmod(x, 2.0)
    return a


def undefined_name(x):
    return x * not_defined_anywhere  # noqa: F821


def uses_raise(x):
    if x > 1.0:
        raise ValueError("no") from None
    return x


def function_reassigned(x):
    def h(t):
        return t
    h = x * 2.0
    return h


def bitwise(x, n):
    return x * (n & 1)


def walrus(x):
    if (y := x * 2.0) > 1.0:
        return y
    return x


def comprehension(x):
    return [x * i for i in range(3)]


NUMPY_MODULE = math


def global_module_value(x):
    return x * NUMPY_MODULE


UNSUPPORTED = [
    # (function, text on the offending line where the caret points, words in the message,
    #  words in the hint)
    (uses_try, "try:", "'Try' statements are not supported", "try/except"),
    (uses_with, "with open", "'With' statements are not supported", "context managers"),
    (uses_yield, "yield x", "'Yield' expressions are not supported", "generators"),
    (writes_global, "global G", "the global variable 'G' is assigned here", "globals"),
    (calls_star_callee, "takes_star(x)", "has *args or **kwargs parameters", "explicit parameters"),
    (function_as_value, "f + 1.0", "the function 'f' is used as a value", "called"),
    (uses_list, "a[0] = 2.0 * x", "assigning to an element of the list 'a'", "append"),
    (range_step_zero, "range(0, 4, 0)", "step must not be zero", None),
    (is_comparison, "x is math.pi", "only supported against None", "=="),
    (string_constant, '"abc"', "constant 'abc' is not supported", "numbers"),
    (calls_local, "g(x)", "calling a local value is not supported", "module-level"),
    (star_args, "def star_args", "*args parameters are not supported", None),
    (kwonly, "def kwonly", "**kwargs parameters are not supported", None),
    (unexpected_keyword, "two_args(x, c=1.0)", "got an unexpected keyword argument 'c'", None),
    (missing_argument, "two_args(x)", "is missing the argument 'b'", None),
    (undefined_name, "not_defined_anywhere", "name 'not_defined_anywhere' is not defined", None),
    (uses_raise, "raise ValueError", "'raise ... from ...' is not supported", "without 'from'"),
    (function_reassigned, "def h(t)", "'h' is both a nested function and a variable", "own name"),
    # bitwise operators take ints and bools (masks); this call passes a float n
    (bitwise, "n & 1", "the bitwise operator & takes integers and booleans", "not differentiable"),
    (walrus, "y := x", "'NamedExpr' expressions are not supported", "separate assignment"),
    (comprehension, "return [x * i", "returning a list comprehension is not supported", "np.array"),
    (global_module_value, "NUMPY_MODULE", "global 'NUMPY_MODULE' of type module", "numbers"),
]


@pytest.mark.parametrize("fn, at, words, hint", UNSUPPORTED, ids=lambda v: getattr(v, "__name__", None))
def test_unsupported_syntax_points_at_user_line(fn, at, words, hint):
    nargs = max(fn.__code__.co_argcount, 1)
    with pytest.raises(zyg.UnsupportedSyntax) as ei:
        zyg.grad(fn, target="python")(*([1.0] * nargs))
    e = ei.value
    assert e.filename == HERE
    assert e.lineno == line_of(fn, at)
    msg = str(e)
    assert words in msg
    assert f'File "{HERE}", line {e.lineno}, column {e.col + 1}' in msg
    # the source line is quoted, with a caret under the offending column
    src_line = linecache.getline(HERE, e.lineno).rstrip("\n")
    assert e.col == src_line.index(at), (e.col, src_line)
    lines = msg.splitlines()
    k = lines.index("    " + src_line.strip())
    indent = len(src_line) - len(src_line.lstrip())
    assert lines[k + 1] == "    " + " " * (e.col - indent) + "^"
    if hint is not None:
        assert e.hint and hint in e.hint
        assert "hint: " + e.hint in msg


def test_unsupported_syntax_is_raised_on_both_targets():
    with pytest.raises(zyg.UnsupportedSyntax):
        zyg.grad(uses_try, target="cpu")(1.0)
    with pytest.raises(zyg.UnsupportedSyntax):
        zyg.pullback(uses_try, 1.0, target="python")


def test_all_errors_are_zyg_errors():
    for cls in (zyg.UnsupportedSyntax, zyg.NoAdjoint, zyg.CompileError, zyg.TypeMismatch):
        assert issubclass(cls, zyg.ZygError)


def no_rule(x):
    return math.remainder(x, 0.7) * x


def test_no_adjoint_names_function_line_and_suggests_a_rule():
    with pytest.raises(zyg.NoAdjoint) as ei:
        zyg.grad(no_rule)(1.5)
    e = ei.value
    assert e.filename == HERE
    assert e.lineno == line_of(no_rule, "remainder")
    msg = str(e)
    assert "no adjoint rule for math.remainder" in msg
    assert f'File "{HERE}", line {e.lineno}' in msg
    assert "return math.remainder(x, 0.7) * x" in msg
    assert "@zyg.adjoint(math.remainder)" in e.hint and "zyg.nondifferentiable" in e.hint
    assert "zyg.stop_gradient" in e.hint


def helper_calling_c(x):
    return math.remainder(x, 0.7) + x


def calls_user_function(x):
    y = x + 1.0
    return helper_calling_c(y) * 2.0


def test_no_adjoint_inside_a_user_function_names_the_callee_line():
    # user functions are transformed too; the C function inside has no rule
    for target in ("python", "cpu"):
        with pytest.raises(zyg.NoAdjoint) as ei:
            zyg.grad(calls_user_function, target=target)(1.5)
        e = ei.value
        assert e.filename == HERE
        assert e.lineno == line_of(helper_calling_c, "math.remainder(x, 0.7) + x")
        assert "math.remainder" in str(e)
        assert "@zyg.adjoint(" in e.hint


def test_no_adjoint_in_pullback():
    with pytest.raises(zyg.NoAdjoint, match="math.remainder"):
        zyg.pullback(no_rule, 1.5, target="python")


def test_no_rule_needed_when_inactive():
    def f(x, n):
        return x * math.lgamma(n)   # n is an int: lgamma's result is not differentiated
    assert zyg.grad(f)(2.0, 4) == pytest.approx(math.lgamma(4))


def test_non_scalar_argument():
    import numpy as np
    with pytest.raises(zyg.TypeMismatch, match="returns an array; grad and value_and_grad need a scalar"):
        zyg.grad(lambda x: x * 2.0)(np.ones(3))
    with pytest.raises(zyg.TypeMismatch, match="argument 0 of .* is a 2-D complex64 array"):
        zyg.grad(lambda x: x * 2.0)(np.ones((2, 2), np.complex64))
    with pytest.raises(zyg.TypeMismatch, match="4-D float64 array"):
        zyg.grad(lambda x: x * 2.0)(np.ones((1, 1, 1, 1)))
    with pytest.raises(zyg.TypeMismatch, match="argument 1 of no_rule2 is a str"):
        zyg.grad(no_rule2, target="python")(1.0, "abc")
    with pytest.raises(zyg.TypeMismatch, match="is a list"):
        zyg.value_and_grad(no_rule2, target="python")(1.0, [1.0])
    with pytest.raises(zyg.TypeMismatch, match="is a 1-D complex64 array"):
        zyg.pullback(no_rule2, 1.0, np.ones(2, np.complex64), target="python")


def no_rule2(x, y):
    return x * 2.0


@numba.njit
def not_typable(x):
    return x + "a"


def calls_untypable(x):
    k = not_typable(3)  # noqa: F841
    return x * 2.0


def test_numba_failure_becomes_compile_error_with_user_line():
    zyg.nondifferentiable(not_typable)
    with pytest.raises(zyg.CompileError) as ei:
        zyg.grad(calls_untypable)(1.0)
    e = ei.value
    assert e.filename == HERE
    assert e.lineno == line_of(calls_untypable, "not_typable(3)")
    msg = str(e)
    assert msg.startswith("numba could not compile the code zyg generated for 'calls_untypable'")
    assert f'File "{HERE}", line {e.lineno}' in msg
    assert "k = not_typable(3)" in msg
    assert "target='python'" in e.hint and "zyg.show" in e.hint
    # the generated file exists, and the line it names is the call
    import re
    m = re.search(r"generated code: (.+), line (\d+)", msg)
    assert m, msg
    gen_path, gen_line = m.group(1), int(m.group(2))
    with open(gen_path) as fh:
        gen = fh.read().splitlines()
    assert "not_typable" in gen[gen_line - 1]
    # and it is a zyg error, raised without numba's long chained traceback
    assert isinstance(e, zyg.ZygError)


def test_missing_return_is_reported():
    def f(x):
        if x > 0:
            return x
    with pytest.raises(zyg.TypeMismatch, match="return"):
        zyg.grad(f)(1.0)


def test_nested_grad_of_a_vector_gradient_is_a_type_error():
    # grad(grad(f)) needs the inner gradient to be a number (w.r.t. a float argument)
    def f(a):
        return float(np.sum(a * a * a))
    import numpy as np
    with pytest.raises(zyg.TypeMismatch, match="nested grad"):
        zyg.grad(zyg.grad(f, target="python"), target="python")(np.ones(3))


@pytest.mark.parametrize("fn,at,words", [
    (uses_subscript, "x[0]", "indexing a float value is not supported"),
    (for_over_list, "in t:", "indexing a tuple with a non-constant index"),
    (local_attribute, "x.size", "'.size' of a float value: only arrays have it"),
])
def test_indexing_a_non_array_is_a_type_error_at_the_line(fn, at, words):
    with pytest.raises(zyg.TypeMismatch) as ei:
        zyg.grad(fn, target="python")(1.0)
    e = ei.value
    assert e.filename == HERE
    assert e.lineno == line_of(fn, at)
    assert words in str(e)


def test_call_returning_a_tuple_of_differentiated_values_is_reported():
    with pytest.raises(zyg.NoAdjoint) as ei:
        zyg.grad(unpack_call, target="python")(1.0)
    assert ei.value.lineno == line_of(unpack_call, "divmod(x, 2.0)")
    assert "divmod" in str(ei.value)
