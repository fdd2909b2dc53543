"""Nested derivatives of code whose adjoint uses the elementwise array rules.

The array rules emit ``_zyg_mulnz(dy, partial)`` (``dy * partial``, exactly zero where
``dy`` is zero even if the partial is inf or nan; zyg/rules/arrays.py).  ``zyg.hessian``,
``zyg.hvp``, ``grad`` of ``grad``, ``jvp`` of a function calling ``zyg.grad`` and a
gradient of zyg's own gradient source differentiate that generated code again, so they
need the helper's own rules (forward and reverse).

References: hand-written numpy gradients, themselves checked against central finite
differences of the function; second derivatives against central finite differences of
those gradients (step and tolerance from tests/conftest.py), and the two targets against
each other.
"""
import numpy as np
import pytest

import zyg
from zyg import backends
from conftest import FD_STEP, RTOL, TARGETS
from zyg.api import _grad_source
from zyg.rules import arrays as arules, dispatch
from zyg.rules import table

# --- functions and their hand-written gradients ---------------------------------------------


def f_sin2(x):
    return np.sum(np.sin(x) ** 2)


def g_sin2(x):
    return np.sin(2.0 * x)


def f_expx(x):
    return np.sum(np.exp(x) * x)


def g_expx(x):
    return np.exp(x) * (1.0 + x)


def f_logreg(w, X, y):
    return np.sum(np.log(1.0 + np.exp(-y * (X @ w))))


def g_logreg(w, X, y):
    z = -y * (X @ w)
    return X.T @ (-y * (1.0 / (1.0 + np.exp(-z))))


def f_sqrtw(x, w):
    # x[0] == 0 and w[0] == 0: sqrt's partial there is inf, reached only through a zero weight
    return np.sum(w * np.sqrt(x))


def g_sqrtw(x, w):
    out = np.zeros_like(x)
    m = w != 0
    out[m] = w[m] * 0.5 / np.sqrt(x[m])
    return out


def f_sins(x, s):
    return np.sum(np.sin(s * x) ** 2)


def ds_sins(x, s):
    """d f_sins / d s."""
    return np.sum(x * np.sin(2.0 * s * x))


def f_sqrts(x, s, w):
    return np.sum(w * np.sqrt(s * x))


def ds_sqrts(x, s, w):
    m = w != 0
    return np.sum(w[m] * 0.5 * x[m] / np.sqrt(s * x[m]))


def pen_sin2(x, c):
    # jvp of a function that calls zyg.grad: forward mode over the gradient's source
    return np.sum(zyg.grad(f_sin2)(x) * c)


RNG = np.random.default_rng(12)
X_LR = RNG.normal(size=(6, 3))
Y_LR = np.where(RNG.normal(size=6) > 0, 1.0, -1.0)
W_LR = np.array([0.3, -0.5, 0.8])
X3 = np.array([0.3, 0.7, 1.1])
XZ = np.array([0.0, 0.7, 1.1])          # sqrt at 0 in element 0 ...
WZ = np.array([0.0, 1.5, 0.7])          # ... whose weight is 0

CASES = {
    "sin2": (f_sin2, g_sin2, (X3,)),
    "expx": (f_expx, g_expx, (np.array([-0.4, 0.2, 0.9]),)),
    "logreg": (f_logreg, g_logreg, (W_LR, X_LR, Y_LR)),
}

# built once per session (numba compiles are slow)
_HESS = {(name, t): zyg.hessian(f, target=t) for name, (f, _, _) in CASES.items() for t in TARGETS}
_HESS_SQRT = {t: zyg.hessian(f_sqrtw, target=t) for t in TARGETS}
_GG_X = {t: zyg.grad(zyg.grad(f_sins, argnums=1, target=t), argnums=0, target=t) for t in TARGETS}
_GG_S = {t: zyg.grad(zyg.grad(f_sins, argnums=1, target=t), argnums=1, target=t) for t in TARGETS}
_GG_SQRT = {t: zyg.grad(zyg.grad(f_sqrts, argnums=1, target=t), argnums=0, target=t)
            for t in TARGETS}


def _step(v: float) -> float:
    return FD_STEP * max(1.0, abs(v))


def fd_jacobian(g, args, skip=()):
    """Central differences of the array-valued ``g`` w.r.t. the elements of ``args[0]``
    (columns; elements in ``skip`` are left as nan: not perturbed)."""
    x = np.array(args[0], dtype=float)
    g0 = np.asarray(g(x, *args[1:]))
    J = np.full(g0.shape + x.shape, np.nan)
    for j in range(x.size):
        if j in skip:
            continue
        h = _step(x[j])
        up, dn = x.copy(), x.copy()
        up[j] += h
        dn[j] -= h
        J[..., j] = (np.asarray(g(up, *args[1:])) - np.asarray(g(dn, *args[1:]))) / (2.0 * h)
    return J


def fd_scalar_grad(f, args, skip=()):
    """Central differences of the scalar ``f`` w.r.t. the elements of ``args[0]``."""
    return fd_jacobian(lambda x, *rest: np.array(f(x, *rest)), args, skip)


def assert_close(got, want, scale, what):
    got, want = np.asarray(got, dtype=float), np.asarray(want, dtype=float)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    atol = RTOL * max(1.0, scale)
    bad = np.abs(got - want) > atol + RTOL * np.maximum(np.abs(got), np.abs(want))
    assert not bad.any(), f"{what}:\nzyg={got!r}\nfd={want!r}"


# --- the references themselves ---------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(CASES))
def test_hand_gradients_match_finite_differences(name):
    f, g, args = CASES[name]
    assert_close(g(*args), fd_scalar_grad(f, args), abs(f(*args)), f"{name} gradient")
    skip = (0,)
    assert_close(g_sqrtw(XZ, WZ)[1:], fd_scalar_grad(f_sqrtw, (XZ, WZ), skip)[1:],
                 f_sqrtw(XZ, WZ), "sqrt gradient")


# --- Hessians and Hessian-vector products (forward over reverse) ------------------------------

@pytest.mark.parametrize("name", sorted(CASES))
def test_hessian_of_array_functions(name):
    f, g, args = CASES[name]
    want = fd_jacobian(g, args)
    want = 0.5 * (want + want.T)
    got = {t: _HESS[(name, t)](*args) for t in TARGETS}
    for t in TARGETS:
        assert_close(got[t], want, np.max(np.abs(g(*args))), f"[{t}] hessian of {name}")
    np.testing.assert_allclose(got["cpu"], got["python"], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("target", TARGETS)
def test_hvp_is_hessian_times_v(target):
    f, g, args = CASES["logreg"]
    v = np.array([0.4, -1.1, 0.6])
    hv = zyg.hvp(f, args[0], v, *args[1:], target=target)
    H = fd_jacobian(g, args)
    assert_close(hv, H @ v, np.max(np.abs(g(*args))), f"[{target}] hvp of logreg")


@pytest.mark.parametrize("target", TARGETS)
def test_hessian_is_exactly_zero_where_only_a_zero_weight_reaches_an_infinite_partial(target):
    H = _HESS_SQRT[target](XZ, WZ)
    assert np.all(np.isfinite(H)), H
    assert np.all(H[0, :] == 0.0) and np.all(H[:, 0] == 0.0), H
    want = fd_jacobian(g_sqrtw, (XZ, WZ), skip=(0,))
    assert_close(H[1:, 1:], want[1:, 1:], np.max(np.abs(g_sqrtw(XZ, WZ))), f"[{target}] hessian")
    g = zyg.grad(f_sqrtw, target=target)(XZ, WZ)
    assert g[0] == 0.0 and np.all(np.isfinite(g)), g


# --- grad of grad ----------------------------------------------------------------------------

@pytest.mark.parametrize("target", TARGETS)
def test_grad_of_grad(target):
    s = 1.3
    got = _GG_X[target](X3, s)
    want = fd_scalar_grad(lambda x, s: ds_sins(x, s), (X3, s))
    assert_close(got, want, abs(ds_sins(X3, s)), f"[{target}] d/dx d/ds")
    h = _step(s)
    d2 = (ds_sins(X3, s + h) - ds_sins(X3, s - h)) / (2.0 * h)
    got_s = _GG_S[target](X3, s)
    assert_close(got_s, d2, abs(ds_sins(X3, s)), f"[{target}] d2/ds2")


def test_grad_of_grad_targets_agree():
    np.testing.assert_allclose(_GG_X["cpu"](X3, 1.3), _GG_X["python"](X3, 1.3), rtol=1e-12)


@pytest.mark.parametrize("target", TARGETS)
def test_grad_of_grad_through_a_zero_weight_is_exactly_zero(target):
    s = 1.3
    got = _GG_SQRT[target](XZ, s, WZ)
    assert got[0] == 0.0 and np.all(np.isfinite(got)), got
    want = fd_scalar_grad(lambda x, s: ds_sqrts(x, s, WZ), (XZ, s), skip=(0,))
    assert_close(got[1:], want[1:], abs(ds_sqrts(XZ, s, WZ)), f"[{target}] d/dx d/ds")


# --- jvp of a function that calls zyg.grad ------------------------------------------------------

@pytest.mark.parametrize("target", TARGETS)
def test_jvp_of_a_gradient(target):
    c = np.array([1.0, -2.0, 0.5])
    v = np.array([0.3, 0.9, -0.4])
    y, ty = zyg.jvp(pen_sin2, (X3, c), (v, None), target=target)
    assert_close(y, np.sum(g_sin2(X3) * c), 1.0, f"[{target}] value")
    H = fd_jacobian(g_sin2, (X3,))
    assert_close(ty, c @ (H @ v), np.max(np.abs(c)), f"[{target}] jvp of grad")


# --- reverse over reverse: a gradient of zyg's own gradient source -----------------------------

_SRC_SQRT = _grad_source(f_sqrtw, (XZ, WZ), 0)
C3 = np.array([1.0, 2.0, -3.0])


def rr_sqrtw(x, w):
    return np.sum(_SRC_SQRT(x, w) * C3)


def rr_sqrtw_ref(x, w):
    return np.sum(g_sqrtw(x, w) * C3)


@pytest.mark.parametrize("target", TARGETS)
def test_reverse_rule_of_the_helper(target):
    assert "_zyg_mulnz(" in open(_SRC_SQRT.__code__.co_filename).read()
    got = zyg.grad(rr_sqrtw, argnums=(0, 1), target=target)(XZ, WZ)
    gx, gw = got
    assert gx[0] == 0.0 and np.all(np.isfinite(gx)), gx
    want_x = fd_scalar_grad(rr_sqrtw_ref, (XZ, WZ), skip=(0,))
    assert_close(gx[1:], want_x[1:], abs(rr_sqrtw_ref(XZ, WZ)), f"[{target}] d/dx")
    # d/dw_j of sum(c * w * 0.5 / sqrt(x)) = c_j * 0.5 / sqrt(x_j): inf at x_j = 0
    assert np.isinf(gw[0])
    want_w = fd_scalar_grad(lambda w, x: rr_sqrtw_ref(x, w), (WZ, XZ), skip=(0,))
    assert_close(gw[1:], want_w[1:], abs(rr_sqrtw_ref(XZ, WZ)), f"[{target}] d/dw")


# --- the helper object -------------------------------------------------------------------------

def test_helper_is_one_object_per_target_and_found_by_the_rule_lookup():
    for t in map(backends.get, TARGETS):
        h = dispatch.helpers(t)["_zyg_mulnz"]
        assert h is arules.mulnz_for(t) is dispatch.helpers(t)["_zyg_mulnz"]
        assert dispatch.rule_for(h) is not None
    assert arules.mulnz_for(backends.get("python")) is arules._mulnz_py
    a = np.array([0.0, 2.0, -1.0])
    b = np.array([np.inf, 3.0, np.nan])
    for t in map(backends.get, TARGETS):
        got = arules.mulnz_for(t)(a, b)
        assert got[0] == 0.0 and got[1] == 6.0 and np.isnan(got[2]), (t, got)


def test_rule_table_does_not_list_the_helper():
    names = " ".join(r[0] for r in table.rows())
    assert "mulnz" not in names
    assert "mulnz" not in table.supported_table()


# --- np.ascontiguousarray (the rules emit it; so nested derivatives meet it) ------------------

def f_contig(A, v):
    return np.sum(np.sin(np.ascontiguousarray(A.T) @ v))


A23 = np.array([[0.3, -0.2, 0.9], [0.5, 1.1, -0.7]])
V2 = np.array([0.8, -0.4])


@pytest.mark.parametrize("target", TARGETS)
def test_ascontiguousarray_grad_and_jvp(target):
    y = f_contig(A23, V2)
    want = fd_scalar_grad(lambda a, v: f_contig(a.reshape(A23.shape), v), (A23.ravel(), V2))
    got = zyg.grad(f_contig, target=target)(A23, V2)
    assert_close(got.ravel(), want, abs(y), f"[{target}] grad")
    dA = np.array([[0.1, 0.2, -0.3], [0.4, -0.5, 0.6]])
    _, t = zyg.jvp(f_contig, (A23, V2), (dA, None), target=target)
    assert_close(t, want @ dA.ravel(), abs(y), f"[{target}] jvp")
