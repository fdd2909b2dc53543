"""Vector forward mode (issue 27): ``zyg.jvp(..., batched=True)`` with a leading lane axis
of k tangents, one pass of the generated code (zyg/pullbacks/forward_batched.py); each lane
equals the single jvp with that lane's tangents, on both targets.  Also jacobian(mode="fwd"),
zyg.hessian and the sparse forward colouring, which run on it."""
from __future__ import annotations

import collections
import math

import numpy as np
import pytest
import scipy.sparse as sp

import zyg
import zyg.api as api

TARGETS = ["python", "cpu"]
K = 5


# -- programs ---------------------------------------------------------------------------
def straight(x, y):
    a = x * y + np.sin(x) / (1.0 + y * y)
    b = np.exp(-a) * x - abs(y - 0.3) + np.sqrt(x * x + 1.0)
    return a * b + max(a, b) - np.tanh(b) ** 2


def loops_branches(x, y):
    s = 0.0
    for i in range(x.shape[0]):
        if x[i] > 0.0:
            s += np.sin(x[i]) * y
        else:
            s -= x[i] * x[i]
    k = 0
    while abs(s) > 1e-3 and k < 20:     # data-dependent trip count
        s *= 0.5 * y
        k += 1
    return s + k


def inplace(x, c):
    n = x.shape[0]
    y = np.empty(n)
    for i in range(n):
        left = x[i - 1] if i > 0 else 0.0
        y[i] = c * left + x[i] ** 2
    y[0] = y[n - 1] * c
    y += c * x
    y *= x
    y[1:3] -= c
    x[2] = 7.0 * c                      # a write into the argument (jvp copies it)
    return y + x


def _helper(u, v):
    return u * np.cos(v) + v


def calls(x, y):
    s = 0.0
    for i in range(x.shape[0]):
        s += _helper(x[i], y)
    return _helper(s, y * x[0])


def numpy_rules(A, x):
    z = A @ x + np.dot(x, x)
    w = np.exp(z) * np.tanh(x) - np.sum(A, axis=0) * x
    return np.linalg.solve(A + 3.0 * np.eye(A.shape[0]), w) + np.cumsum(w) + np.mean(z)


Pair = collections.namedtuple("Pair", "p q")


def tuples(t, c):
    p, q = t
    return (p * q * c, np.sin(p) + q)


def float32_prog(x, c):
    y = x * x * c + np.float32(1.0)
    for i in range(1, x.shape[0]):
        y[i] += y[i - 1] * np.float32(0.5)
    return y


def _lanes(x, seed):
    rng = np.random.default_rng(seed)
    if isinstance(x, np.ndarray):
        return rng.normal(size=(K,) + x.shape).astype(x.dtype)
    return rng.normal(size=K)


def _check(f, args, target, active=None, tol=1e-12):
    active = range(len(args)) if active is None else active
    T = tuple(_lanes(a, i) if i in active else None for i, a in enumerate(args))
    y, ty = zyg.jvp(f, args, T, target=target, batched=True)
    singles = []
    for j in range(K):
        tj = tuple(None if t is None else t[j] for t in T)
        yj, tyj = zyg.jvp(f, args, tj, target=target)
        singles.append(tyj)
    np.testing.assert_allclose(y, yj, rtol=tol, atol=tol)
    ref = np.stack([np.asarray(s) for s in singles])
    assert np.shape(ty) == ref.shape
    np.testing.assert_allclose(ty, ref, rtol=tol, atol=tol)
    assert _vector_pass(f), "fell back to one jvp per lane"
    return ty


def _vector_pass(f) -> bool:
    """Did jvp(f, batched=True) compile the vector forward mode (not the per-lane
    fallback of a function with a construct it does not handle)?"""
    got = [v for k, v in api._JVPS.items() if k[0] is f and k[-1] == "batched"]
    return bool(got) and all(v[0] is not None for v in got)


@pytest.mark.parametrize("target", TARGETS)
def test_straight_line(target):
    _check(straight, (0.7, 1.3), target)
    _check(straight, (0.7, 1.3), target, active=[1])


@pytest.mark.parametrize("target", TARGETS)
def test_loops_branches_while(target):
    x = np.array([0.3, -0.2, 1.5, -0.9, 0.4])
    _check(loops_branches, (x, 0.7), target)


@pytest.mark.parametrize("target", TARGETS)
def test_inplace_writes(target):
    x = np.linspace(-1.0, 1.0, 6)
    keep = x.copy()
    _check(inplace, (x, 0.4), target)
    np.testing.assert_array_equal(x, keep)          # the caller's array is unchanged


@pytest.mark.parametrize("target", TARGETS)
def test_calls(target):
    _check(calls, (np.array([0.1, 0.5, -0.3]), 0.9), target)


@pytest.mark.parametrize("target", TARGETS)
def test_linalg_ufunc_rules(target):
    rng = np.random.default_rng(1)
    _check(numpy_rules, (rng.normal(size=(4, 4)), rng.normal(size=4)), target)


@pytest.mark.parametrize("target", TARGETS)
def test_tuples(target):
    t = (0.3, 1.1)
    T = (np.arange(K) * 0.5, np.ones(K))
    y, ty = zyg.jvp(tuples, (t, 2.0), (T, None), target=target, batched=True)
    for j in range(K):
        _, tj = zyg.jvp(tuples, (t, 2.0), ((T[0][j], T[1][j]), None), target=target)
        np.testing.assert_allclose([ty[0][j], ty[1][j]], tj, rtol=1e-12)


@pytest.mark.parametrize("target", TARGETS)
def test_float32(target):
    x = np.linspace(0.1, 1.0, 5).astype(np.float32)
    ty = _check(float32_prog, (x, 0.5), target, tol=1e-6)
    assert ty.shape == (K, 5)


def reshaped(x):
    v = x.reshape((2, 3))               # a view written through: no vector form
    v[0, 1] = v[1, 1] * 2.0
    return np.sin(x) * x[1]


@pytest.mark.parametrize("target", TARGETS)
def test_fallback_per_lane(target):
    x = np.linspace(0.1, 0.6, 6)
    T = _lanes(x, 2)
    y, ty = zyg.jvp(reshaped, (x,), (T,), target=target, batched=True)
    assert not _vector_pass(reshaped)
    for j in range(K):
        np.testing.assert_allclose(ty[j], zyg.jvp(reshaped, (x,), (T[j],), target=target)[1],
                                   rtol=1e-12, atol=1e-12)


def test_targets_agree():
    x = np.array([0.3, -0.2, 1.5, -0.9, 0.4])
    T = (_lanes(x, 0), _lanes(0.7, 1))
    a = zyg.jvp(loops_branches, (x, 0.7), T, target="python", batched=True)[1]
    b = zyg.jvp(loops_branches, (x, 0.7), T, target="cpu", batched=True)[1]
    np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-13)


def test_bad_lane_shapes():
    with pytest.raises(zyg.TypeMismatch):
        zyg.jvp(straight, (0.7, 1.3), (np.ones(3), np.ones(4)), batched=True)
    with pytest.raises(zyg.TypeMismatch):
        zyg.jvp(straight, (0.7, 1.3), (1.0, None), batched=True)
    with pytest.raises(zyg.TypeMismatch):
        zyg.jvp(inplace, (np.ones(4), 0.3), (np.ones(4), None), batched=True)


# -- jacobian, hessian, sparse -----------------------------------------------------------
def _central(f, args, i, h=1e-6):
    x = np.asarray(args[i], dtype=float)
    cols = []
    for k in range(x.size):
        e = np.zeros(x.size)
        e[k] = h
        up = list(args)
        dn = list(args)
        up[i] = (x.ravel() + e).reshape(x.shape) if x.ndim else float(x + h)
        dn[i] = (x.ravel() - e).reshape(x.shape) if x.ndim else float(x - h)
        up = [a.copy() if isinstance(a, np.ndarray) else a for a in up]
        dn = [a.copy() if isinstance(a, np.ndarray) else a for a in dn]
        cols.append(np.ravel((np.asarray(f(*up)) - np.asarray(f(*dn))) / (2 * h)))
    return np.stack(cols, axis=1)


@pytest.mark.parametrize("target", TARGETS)
def test_jacobian_fwd_rev_fd(target, monkeypatch):
    monkeypatch.setattr(api, "JAC_CHUNK", 4)          # several chunks, a short last one
    x = np.linspace(-1.0, 1.0, 10)
    Jf = zyg.jacobian(inplace, mode="fwd", target=target)(x, 0.4)
    Jr = zyg.jacobian(inplace, mode="rev", target=target)(x, 0.4)
    np.testing.assert_allclose(Jf, Jr, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(Jf, _central(inplace, (x, 0.4), 0), rtol=1e-6, atol=1e-6)
    jc = zyg.jacobian(inplace, argnums=1, mode="fwd", target=target)(x, 0.4)
    assert jc.shape == (10,)
    np.testing.assert_allclose(jc, np.ravel(_central(inplace, (x, 0.4), 1)), rtol=1e-6, atol=1e-6)
    A = np.random.default_rng(3).normal(size=(4, 4))
    Jn = zyg.jacobian(numpy_rules, argnums=0, mode="fwd", target=target)(A, np.ones(4))
    Jnr = zyg.jacobian(numpy_rules, argnums=0, mode="rev", target=target)(A, np.ones(4))
    assert Jn.shape == (4, 4, 4)
    np.testing.assert_allclose(Jn, Jnr, rtol=1e-11, atol=1e-11)


def scalar_stencil(x, c):
    # loops over numbers only: its vector form computes no array by a rule
    n = x.shape[0]
    y = np.zeros(n)
    for i in range(n):
        s = 0.0
        for k in range(max(0, i - 1), min(n, i + 2)):
            s += math.sin(c * x[k]) * x[i]
        y[i] = s
    x[0] = 3.0 * c                      # a write into the argument: every pass sees the input
    return y


@pytest.mark.parametrize("target", TARGETS)
def test_jacobian_of_loops_over_numbers_runs_scalar_passes(target, monkeypatch):
    """jacobian(mode="fwd") of a function whose vector form is only loops over numbers runs
    the scalar jvp per column (faster there); the same matrix as the vector pass, the
    reverse mode and central differences."""
    monkeypatch.setattr(api, "JAC_CHUNK", 4)
    x = np.linspace(-1.0, 1.0, 9)
    J = zyg.jacobian(scalar_stencil, mode="fwd", target=target)(x.copy(), 0.7)
    keys = [k for k in api._JVPS if k[0] is scalar_stencil and k[-1] == "batched"]
    assert keys and all(k in api._SCALAR_VECTOR_FORMS for k in keys)
    E = np.eye(9)
    _, T = zyg.jvp(scalar_stencil, (x.copy(), 0.7), (E, None), target=target, batched=True)
    assert _vector_pass(scalar_stencil)
    np.testing.assert_allclose(J, T.T, rtol=1e-13, atol=1e-13)
    Jr = zyg.jacobian(scalar_stencil, mode="rev", target=target)(x.copy(), 0.7)
    np.testing.assert_allclose(J, Jr, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(J, _central(scalar_stencil, (x.copy(), 0.7), 0), rtol=1e-6, atol=1e-6)


def vec_loss(x):
    return np.sum(np.exp(x) * x) + np.sum(x[1:] * x[:-1]) + np.sum(np.tanh(0.3 * x) ** 2)


def loop_loss(x):
    s = 0.0
    for i in range(x.shape[0] - 1):
        s += 100.0 * (x[i + 1] - x[i] ** 2) ** 2 + (1.0 - x[i]) ** 2
    return s


def rebound_loss(x):
    a = x.copy()
    s = 0.0
    for k in range(3):
        a = np.tanh(a) * x + 0.1 * a            # an array made in a loop: pushed on the tape
        s += np.sum(a * a) * (k + 1)
    for i in range(x.shape[0]):
        if x[i] > 0.5:
            s += x[i] ** 3
    return s * np.dot(x, x)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("f", [vec_loss, loop_loss, rebound_loss])
def test_hessian_equals_previous_path(target, f, monkeypatch):
    x = np.linspace(0.1, 1.0, 37)               # two chunks of 32
    monkeypatch.setattr(api, "HESSIAN_BATCHED", "always")
    got = []
    orig = api._batched_hessian
    monkeypatch.setattr(api, "_batched_hessian", lambda *a: got.append(orig(*a)) or got[-1])
    H1 = zyg.hessian(f, target=target)(x)
    assert got and got[-1] is not None          # the vector pass ran
    monkeypatch.setattr(api, "HESSIAN_BATCHED", False)
    H0 = zyg.hessian(f, target=target)(x)
    np.testing.assert_allclose(H1, H0, rtol=1e-12, atol=1e-12)


def vec_loss2(x):
    return np.sum(np.sin(x) * x * x)


def test_hessian_uses_vector_pass(monkeypatch):
    got = []
    orig = api._batched_hessian
    monkeypatch.setattr(api, "_batched_hessian", lambda *a: got.append(orig(*a)) or got[-1])
    x = np.linspace(0.1, 1.0, 6)
    H = zyg.hessian(vec_loss2, target="python")(x)
    assert got and got[-1] is not None          # numpy code: the vector pass
    d = 2 * np.sin(x) + 4 * x * np.cos(x) - x * x * np.sin(x)
    np.testing.assert_allclose(H, np.diag(d), rtol=1e-12, atol=1e-12)
    got.clear()
    zyg.hessian(loop_loss, target="python")(np.linspace(0.1, 1.0, 5))
    assert got == [] or got[-1] is None         # loops over numbers: per column


def chain(x):
    n = x.shape[0]
    y = np.empty(n)
    for i in range(n):
        left = x[i - 1] if i > 0 else 0.0
        right = x[i + 1] if i < n - 1 else 0.0
        y[i] = left * x[i] + np.sin(right) + x[i] ** 2
    return y


@pytest.mark.parametrize("target", TARGETS)
def test_sparse_forward_equals_dense(target, monkeypatch):
    import zyg.sparse as zs
    n = 12
    x = np.linspace(0.2, 1.4, n)
    P = sp.diags([1, 1, 1], [-1, 0, 1], shape=(n, n))
    calls = []
    orig = zs.by_columns

    def spy(P_, product, products=None, chunk=32):
        calls.append(products is not None)
        return orig(P_, product, products, 2)        # two colours per vector pass
    monkeypatch.setattr(zs, "by_columns", spy)
    J = zyg.jacobian(chain, mode="fwd", sparsity=P, target=target)(x)
    assert calls == [True] and J.passes == 3
    D = zyg.jacobian(chain, mode="rev", target=target)(x)
    np.testing.assert_allclose(J.toarray(), D, rtol=1e-12, atol=1e-12)


def banded_loss(x):
    return np.sum(np.exp(x[1:] * x[:-1])) + np.sum(np.sin(x) * x)


@pytest.mark.parametrize("target", TARGETS)
def test_sparse_hessian_vector_pass(target, monkeypatch):
    import zyg.sparse as zs
    n = 9
    x = np.linspace(0.1, 0.9, n)
    P = sp.diags([1, 1, 1], [-1, 0, 1], shape=(n, n))
    calls = []
    orig = zs.by_columns

    def spy(P_, product, products=None, chunk=32):
        calls.append(products is not None)
        return orig(P_, product, products, chunk)
    monkeypatch.setattr(zs, "by_columns", spy)
    H = zyg.hessian(banded_loss, sparsity=P, target=target)(x)
    assert calls == [True] and H.passes == 3
    D = zyg.hessian(banded_loss, target=target)(x)
    np.testing.assert_allclose(H.toarray(), D, rtol=1e-12, atol=1e-12)


def dict_prog(p, x):
    return p["w"] * np.sin(x) + p["b"] * x[0]


@pytest.mark.parametrize("target", TARGETS)
def test_dict_arguments(target):
    p = {"w": np.array([0.5, 2.0, 1.0]), "b": 0.3}
    x = np.array([0.1, 0.7, -0.4])
    T = {"b": np.arange(K, dtype=float), "w": _lanes(p["w"], 4)}     # keys matched by name
    y, ty = zyg.jvp(dict_prog, (p, x), (T, _lanes(x, 5)), target=target, batched=True)
    X = _lanes(x, 5)
    for j in range(K):
        tj = {"w": T["w"][j], "b": T["b"][j]}
        np.testing.assert_allclose(ty[j], zyg.jvp(dict_prog, (p, x), (tj, X[j]), target=target)[1],
                                   rtol=1e-12, atol=1e-12)


# -- every case of the forward-mode suite (tests/test_jvp.py) ---------------------------
import test_jvp as tj  # noqa: E402  (the cases of the reverse-mode suites)


def _batched_direction(args, k, seed):
    rng = np.random.default_rng(seed)

    def one(x):
        if isinstance(x, tuple):
            items = [one(e) for e in x]
            return type(x)(*items) if hasattr(x, "_fields") else tuple(items)
        if isinstance(x, np.ndarray):
            return rng.standard_normal((k,) + x.shape).astype(x.dtype) if x.dtype.kind == "f" else None
        if isinstance(x, float):
            return rng.standard_normal(k)
        return None
    return tuple(one(x) for x in args)


def _leaves(v):
    if isinstance(v, tuple):
        return [x for e in v for x in _leaves(e)]
    return [v]


def _sweep(case, target):
    f, args = case
    if f is tj.tc.chain:
        from callees import register_rules
        register_rules()
    k = 3
    T = _batched_direction(args, k, 7)
    if all(t is None for t in _leaves(T)):
        pytest.skip("no float argument")
    fresh = tj.shifted(args, tuple(None for _ in args), 0.0)
    y, ty = zyg.jvp(f, fresh, T, target=target, batched=True)
    for j in range(k):
        tjj = tuple(_lane_of(t, j) for t in T)
        fresh = tj.shifted(args, tuple(None for _ in args), 0.0)
        _, t1 = zyg.jvp(f, fresh, tjj, target=target)
        for a, b in zip(_leaves(ty), _leaves(t1)):
            np.testing.assert_allclose(np.asarray(a)[j], b, rtol=1e-12, atol=1e-12,
                                       err_msg=f"{target}: {f.__name__} lane {j}")


def _lane_of(t, j):
    if t is None:
        return None
    if isinstance(t, tuple):
        items = [_lane_of(x, j) for x in t]
        return type(t)(*items) if hasattr(t, "_fields") else tuple(items)
    v = t[j]
    return float(v) if np.ndim(v) == 0 else v


@pytest.mark.parametrize("case", tj.ALL, ids=tj._id)
def test_sweep_python(case):
    _sweep(case, "python")


@pytest.mark.parametrize("case", tj.CPU[::2], ids=tj._id)
def test_sweep_cpu(case):
    _sweep(case, "cpu")
