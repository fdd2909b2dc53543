"""Local lists with append, list comprehensions, zip/enumerate over range(), and sums of
generators of arrays (issue 13, "Python"), differentiated unchanged on both targets against
central finite differences; and the list uses zyg rejects, with their messages.

Mechanism: zyg/ssa/lists.py (a list is an array buffer and a length; docs/subset.md).
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import zyg
from conftest import TARGETS, cached

W3 = np.array([1.0, -2.0, 0.5])


def append_floats(x):
    out = []
    for i in range(x.shape[0]):
        out.append(x[i] * x[i] + 0.5 * x[i])
    a = np.array(out)
    return np.sum(a * a) + sum(out) + len(out) * out[1] * out[-1]


def iterate_list(x):
    out = []
    for v in x:
        out.append(math.sin(v))
    s = 0.0
    for v in out:
        s += v * v
    for i, v in enumerate(out):
        s += i * v
    return s


def append_under_if(x):
    out = []
    for i in range(x.shape[0]):
        if x[i] > 0.0:
            out.append(np.exp(x[i]))
    return sum(out) * max(out) + min(out)


def append_rows(x):
    rows = []
    for i in range(x.shape[0]):
        rows.append(x[i] * W3)
    m = np.array(rows)
    return np.sum(m * m) + np.sum(sum(rows)) + np.sum(rows[0] * rows[-1])


def list_literal_then_append(x):
    a = [x[0], 2.0 * x[1], np.cos(x[2])]
    a.append(x[3] ** 3)
    return np.sum(np.array(a) ** 2)


def list_reset_in_outer_loop(x):
    tot = 0.0
    for k in range(3):
        row = []
        for i in range(x.shape[0]):
            row.append(x[i] * (k + 1.0))
        tot += np.sum(np.array(row) ** 2) * row[k]
    return tot


def list_then_array_same_name(x):
    out = []
    for i in range(x.shape[0] - 1):
        out.append(x[i + 1] - x[i])
    out = np.array(out)
    return np.sum(out ** 2) + out[0]


def comp_in_np_array(x):
    return np.sum(np.array([np.sin(v) * v for v in x]))


def comp_assigned(x):
    n = x.shape[0]
    sq = [x[i] ** 2 for i in range(n) if i != 1]
    return sum(sq) * sq[0] + max(sq) + np.mean(sq)


def comp_nested(x):
    m = [[x[i] * x[j] for j in range(3)] for i in range(3)]
    return np.sum(np.array(m) ** 2)


def comp_of_arrays(x):
    parts = [x * (k + 1.0) for k in range(3)]
    return np.sum(np.array(parts) ** 2)


def zip_range(x):
    s = 0.0
    for i, v in zip(range(1, 5), x):
        s += i * v * v
    for k, v in enumerate(range(2)):
        s += k * v * x[0]
    return s


def zip_arrays(x):
    y = np.cos(x)
    s = 0.0
    for a, b in zip(x, y):
        s += a * b
    return s


def sum_gen_of_arrays(x):
    n = x.shape[0]
    w = np.array([0.5, 1.5])
    t = sum(x[i] * w for i in range(n))
    return np.sum(t * t)


def sum_gen_with_start(x):
    return sum((v * v for v in x), 1.0)


def while_list_not_differentiated(x):
    h = []
    s = x[0]
    k = 0
    while k < 5:
        s = s * 0.9 + x[1]
        h.append(s)
        k += 1
    return s * len(h)


SUPPORTED = [append_floats, iterate_list, append_under_if, append_rows,
             list_literal_then_append, list_reset_in_outer_loop, list_then_array_same_name,
             comp_in_np_array, comp_assigned, comp_nested, comp_of_arrays, zip_range,
             zip_arrays, sum_gen_of_arrays, sum_gen_with_start, while_list_not_differentiated]

X = np.array([0.3, 0.7, 1.1, -0.4])


def fd_array(f, x, h=1e-6):
    """Central differences of ``f`` w.r.t. every element of ``x`` (a fresh copy per call)."""
    out = np.zeros(x.shape)
    for k in range(x.size):
        up, dn = x.copy(), x.copy()
        up[k] += h
        dn[k] -= h
        out[k] = (f(up) - f(dn)) / (2.0 * h)
    return out


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("f", SUPPORTED, ids=lambda f: f.__name__)
def test_list_constructs_match_finite_differences(f, target):
    x = X.copy()
    y = f(x.copy())
    g = cached("grad", f, 0, target)(x)
    assert np.array_equal(x, X), "the argument changed"
    expect = fd_array(f, X)
    assert isinstance(g, np.ndarray) and g.shape == X.shape
    assert np.allclose(g, expect, rtol=1e-6, atol=1e-6 * max(1.0, abs(y))), (g, expect)
    v, _ = cached("value_and_grad", f, 0, target)(x)
    assert v == pytest.approx(y, rel=1e-12)


def test_list_sum_gradient_is_exact_on_a_known_case():
    # d/dx sum(x_i^2 for the list) = 2 x, independently of finite differences
    def f(x):
        out = [v * v for v in x]
        return sum(out)
    x = np.array([0.25, -1.5, 2.0])
    for t in TARGETS:
        assert np.allclose(zyg.grad(f, target=t)(x), 2.0 * x, rtol=1e-14, atol=0.0)


def test_list_with_many_elements_on_cpu():
    # the buffer is reserved once from the loop's trip count: no reallocation in the loop
    def f(x):
        out = []
        for i in range(x.shape[0]):
            out.append(x[i] * x[i])
        return np.sum(np.array(out)) + out[-1]
    x = np.linspace(-1.0, 1.0, 500)
    g = zyg.grad(f, target="cpu")(x)
    expect = 2.0 * x
    expect[-1] += 2.0 * x[-1]
    assert np.allclose(g, expect, rtol=1e-13, atol=1e-13)


# -- what is not supported says so, at the user's line ------------------------------------

def returns_list(x):
    out = [x, x * 2.0]
    return out


def aliases_list(x):
    out = []
    out.append(x)
    other = out
    other.append(x)
    return x


def writes_element(x):
    out = [x, x]
    out[0] = x * 3.0
    return out[0]


def augments_element(x):
    out = [x, x]
    out[1] += x
    return out[0]


def extends_list(x):
    out = []
    out.extend([x, x])
    return x


def list_plus_equals(x):
    out = [x]
    out += [x]
    return x


def while_list_differentiated(x):
    h = []
    s = x
    k = 0
    while k < 5:
        s = s * 0.9 + 1.0
        h.append(s)
        k += 1
    return sum(h)


def append_then_break(x):
    out = []
    for i in range(10):
        if i >= 3:
            break
        out.append(x * i)
    return sum(out)


def mixed_kinds(x):
    out = [x, np.array([x, x])]
    return np.sum(np.array(out[1]))


def read_before_append(x):
    out = []
    n = len(out)
    return x * n


REJECTED = [
    (returns_list, "return out", "returning the list 'out' is not supported", "np.array"),
    (aliases_list, "other = out", "the list 'out' is given a second name", "np.array(out)"),
    (writes_element, "out[0] = x * 3.0", "assigning to an element of the list 'out'", "append"),
    (augments_element, "out[1] += x", "assigning to an element of the list 'out'", "append"),
    (extends_list, "out.extend", "out.extend() is not supported on lists", "out.append(v)"),
    (list_plus_equals, "out += [x]", "'out += ...' on a list is not supported", "out.append(v)"),
    (while_list_differentiated, "h.append(s)", "appended to in a 'while' loop", "range(max_iter)"),
    (mixed_kinds, "out = [x, np.array", "not numbers or arrays of one kind", "one shape"),
    (read_before_append, "len(out)", "used before anything is appended", "append"),
]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("fn, at, words, hint", REJECTED, ids=lambda v: getattr(v, "__name__", None))
def test_rejected_list_uses_name_the_line(fn, at, words, hint, target):
    with pytest.raises(zyg.UnsupportedSyntax) as ei:
        zyg.grad(fn, target=target)(0.7)
    e = ei.value
    text = str(e)
    assert words in text, text
    assert hint in (e.hint or ""), e.hint
    assert e.filename == __file__
    import linecache
    assert at in linecache.getline(__file__, e.lineno), (e.lineno, text)


@pytest.mark.parametrize("target", TARGETS)
def test_list_appended_in_a_loop_left_by_break(target):
    """Once refused (an array carried by a loop left by 'break' lost its cotangent:
    fixed in the transform, tests/test_loop_exits.py); now differentiated."""
    g = zyg.grad(append_then_break, target=target)(0.7)
    assert g == pytest.approx(3.0, rel=1e-14)        # sum(x * i for i < 3) = 3 x
