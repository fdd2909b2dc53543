"""``zyg.checkpoint`` of blocks that write into their arguments, and of tuple-valued
blocks (issue 12, item 5).

The backward pass of a checkpoint recomputes the block from its arguments. A block that
wrote into an argument array used to be recomputed from the written contents (d/dv[0]
5.7 instead of 3.6 in the issue), and the write's own Jacobian was lost. Every case runs
on both targets against central finite differences, through ``value_and_grad`` and
``pullback``, and checks that the caller's arrays come back unchanged.
"""
import numpy as np
import pytest

import zyg

TARGETS = ("python", "cpu")
RNG = np.random.default_rng(5)


def _fresh(args):
    return [a.copy() if isinstance(a, np.ndarray) else a for a in args]


def _fd(f, args, i, h=1e-6):
    a = args[i]
    if isinstance(a, np.ndarray):
        g = np.zeros(a.shape)
        for idx in np.ndindex(a.shape):
            up, dn = _fresh(args), _fresh(args)
            up[i][idx] += h
            dn[i][idx] -= h
            g[idx] = (f(*up) - f(*dn)) / (2 * h)
        return g
    up, dn = _fresh(args), _fresh(args)
    up[i] = a + h
    dn[i] = a - h
    return (f(*up) - f(*dn)) / (2 * h)


_BUILT = {}


def check(f, args, argnums=(0,), rtol=1e-6, atol=1e-8):
    want_val = f(*_fresh(args))
    want = [_fd(f, _fresh(args), i) for i in argnums]
    assert any(np.any(np.asarray(w) != 0) for w in want)
    for target in TARGETS:
        key = (f, argnums, target)
        if key not in _BUILT:
            _BUILT[key] = zyg.value_and_grad(f, argnums=argnums, target=target)
        before = _fresh(args)
        val, g = _BUILT[key](*args)
        for x, b in zip(args, before):
            if isinstance(x, np.ndarray):
                np.testing.assert_array_equal(x, b, err_msg=f"{target}: an input array was changed")
        np.testing.assert_allclose(val, want_val, rtol=1e-12, atol=1e-14, err_msg=f"{target}: value")
        for i, gi, wi in zip(argnums, g, want):
            np.testing.assert_allclose(gi, wi, rtol=rtol, atol=atol, err_msg=f"{target}: d/d(arg {i})")
        y, back = zyg.pullback(f, *args, target=target)
        np.testing.assert_allclose(y, want_val, rtol=1e-12, atol=1e-14)
        gb = back(1.0)
        for x, b in zip(args, before):
            if isinstance(x, np.ndarray):
                np.testing.assert_array_equal(x, b, err_msg=f"{target}: pullback left an input changed")
        for i, wi in zip(argnums, want):
            np.testing.assert_allclose(gb[i], wi, rtol=rtol, atol=atol, err_msg=f"{target} pullback")


# -- the issue's reproducer ------------------------------------------------------------
def doubles_first(v):
    v[0] = v[0] * 2.0
    return np.sum(v * v)


def issue_case(v):
    w = v.copy()
    a = zyg.checkpoint(doubles_first, w)
    return a + np.sum(w * v)


def test_issue_reproducer():
    v = np.array([0.3, 0.5, 0.7])
    for t in TARGETS:
        g = zyg.grad(issue_case, target=t)(v)
        np.testing.assert_allclose(g, [3.6, 2.0, 2.8], rtol=1e-12)
    check(issue_case, (v,))


# -- writes into the caller's arrays, several arguments, loops, views -----------------------
def on_argument(v):
    """The block writes into the caller's own array: it must come back unchanged."""
    a = zyg.checkpoint(doubles_first, v)
    return a + np.sum(v * v * v)


def step(u, x, dt):
    """One explicit step in place on u (2-D), returning an energy."""
    n, m = u.shape
    e = 0.0
    for i in range(n):
        for j in range(m):
            u[i, j] = u[i, j] + dt * np.sin(x[j] * u[i, j])
            e += u[i, j] * u[i, j]
    return e


def steps_in_loop(u0, x, dt):
    """The usual use: one checkpoint per time step of a state updated in place."""
    u = u0.copy()
    s = 0.0
    for t in range(3):
        s = s * 0.5 + zyg.checkpoint(step, u, x, dt)
    return s + np.sum(u * x)


def scale_and_sum(r, c):
    for j in range(r.shape[0]):
        r[j] = r[j] * c + 1.0
    return np.sum(r)


def on_rows(A, c):
    """Row views of a local copy written by the block, one per iteration."""
    B = A.copy()
    s = 0.0
    for i in range(B.shape[0]):
        s += zyg.checkpoint(scale_and_sum, B[i], c)
    return s + np.sum(B * B)


def reads_before(v):
    """The argument is read before and after the block writes into it."""
    w = v * 1.5
    s = np.sum(w * w)
    a = zyg.checkpoint(doubles_first, w)
    return s * a + np.sum(np.sin(w))


@pytest.mark.parametrize("f,args,argnums", [
    (on_argument, lambda: (RNG.uniform(0.2, 1.2, 4),), (0,)),
    (steps_in_loop, lambda: (RNG.uniform(0.2, 1.2, (2, 3)), RNG.uniform(0.2, 1.2, 3), 0.3), (0, 1, 2)),
    (on_rows, lambda: (RNG.uniform(0.2, 1.2, (3, 3)), 0.7), (0, 1)),
    (reads_before, lambda: (RNG.uniform(0.2, 1.2, 3),), (0,)),
], ids=lambda v: getattr(v, "__name__", ""))
def test_blocks_that_write(f, args, argnums):
    check(f, args(), argnums)


# -- tuple-valued blocks ---------------------------------------------------------------------
def two_sums(x, c):
    return np.sum(x * x) * c, np.sum(np.sin(x))


def tuple_block(x, c):
    a, b = zyg.checkpoint(two_sums, x, c)
    return a * b + a


def writes_and_pairs(u, c):
    u[1] = u[1] * c
    return np.sum(u), u[0] * u[1]


def tuple_and_write(x, c):
    u = x.copy()
    p, q = zyg.checkpoint(writes_and_pairs, u, c)
    r = zyg.checkpoint(writes_and_pairs, u, c)
    return p * q + np.sum(u * x) + r[0] - r[1]


@pytest.mark.parametrize("f,args,argnums", [
    (tuple_block, lambda: (RNG.uniform(0.2, 1.2, 3), 0.8), (0, 1)),
    (tuple_and_write, lambda: (RNG.uniform(0.2, 1.2, 3), 0.8), (0, 1)),
], ids=lambda v: getattr(v, "__name__", ""))
def test_tuple_blocks(f, args, argnums):
    check(f, args(), argnums)


# -- what zyg refuses, at the user's line ------------------------------------------------------
def adds_into(a, b):
    a[0] = a[0] + b[0]
    return np.sum(a)


def aliased(v):
    w = v.copy()
    return zyg.checkpoint(adds_into, w, w)


def array_and_number(x):
    return x * 2.0, np.sum(x)


def array_in_tuple(x):
    a, b = zyg.checkpoint(array_and_number, x)
    return np.sum(a) + b


@pytest.mark.parametrize("f,words", [
    (aliased, ["shares memory", "argument 0", "argument 1"]),
    (array_in_tuple, ["not a number"]),
], ids=lambda v: getattr(v, "__name__", ""))
def test_refused_with_line(f, words):
    for t in TARGETS:
        with pytest.raises(zyg.ZygError) as e:
            zyg.grad(f, target=t)(RNG.uniform(0.2, 1.2, 3))
        msg = str(e.value)
        assert "test_checkpoint_mutation.py" in msg and "zyg.checkpoint(" in msg, msg
        for w in words:
            assert w in msg, msg


# -- the sibling: checkpointed_range loops that write arrays in place --------------------------
def ck_range_writes(u0, x):
    u = u0.copy()
    n = u.shape[0]
    for t in zyg.checkpointed_range(5, snapshots=2):
        for i in range(n):
            u[i] = u[i] + 0.2 * np.sin(x[i] * u[(i + 1) % n])
    return np.sum(u * u)


def test_checkpointed_range_writing_arrays():
    check(ck_range_writes, (RNG.uniform(0.2, 1.2, 4), RNG.uniform(0.2, 1.2, 4)), (0, 1))
