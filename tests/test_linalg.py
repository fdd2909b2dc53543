"""Linear algebra (zyg/rules/linalg.py) through the generic array-rule checker, both targets.

Every rule of ``LINALG_RULES`` and ``TUPLE_RULES`` has cases here (checked by
``test_every_linalg_rule_has_a_case``): ``tests/arraycheck.py`` differentiates
``np.sum(<expr> * w)`` and compares with finite differences of every element and of
random directions.  Inputs are well conditioned: diagonally dominant matrices, symmetric
positive definite ones with well separated eigenvalues, tall full-rank ones for qr and
lstsq.  Forward mode (``zyg.jvp``) is checked against finite differences too, and the
errors for what is not differentiable name the user's line.
"""
from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg as sla

import zyg
from zyg.rules import linalg as lrules

import arraycheck
from arraycheck import check_expr

arraycheck.NAMES["sla"] = sla

RNG = np.random.default_rng(20240613)
TARGETS = ("python", "cpu")


def U(*shape):
    return RNG.uniform(-1.0, 1.0, shape)


def well(n):
    """A well-conditioned square matrix."""
    return U(n, n) + n * np.eye(n)


def spd(n):
    """Symmetric positive definite with well separated eigenvalues."""
    q, _ = np.linalg.qr(U(n, n))
    return (q * np.linspace(1.0, 2.0 + n, n)) @ q.T


def tri(n, lower):
    m = U(n, n) * 0.5 + 2.0 * np.eye(n)
    return np.tril(m) if lower else np.triu(m)


def distinct_abs(*shape):
    while True:
        x = U(*shape)
        a = np.sort(np.abs(np.ravel(x)))
        if np.min(np.diff(a)) > 0.05 and a[0] > 0.05:
            return x


# (id, expression, arguments, the rule keys it covers)
CASES = [
    ("solve[vec]", "np.linalg.solve(a0, a1)", (well(4), U(4)), [np.linalg.solve]),
    ("solve[mat]", "np.linalg.solve(a0, a1)", (well(4), U(4, 2)), [np.linalg.solve]),
    ("inv", "np.linalg.inv(a0)", (well(4),), [np.linalg.inv]),
    ("det", "np.linalg.det(a0)", (well(3),), [np.linalg.det]),
    ("slogdet[1]", "np.linalg.slogdet(a0)[1]", (well(4),), [np.linalg.slogdet]),
    ("slogdet[sign*logabs]", "np.linalg.slogdet(a0)[0] * np.linalg.slogdet(a0)[1]", (-well(3),),
     [np.linalg.slogdet]),
    ("cholesky", "np.linalg.cholesky(a0)", (spd(4),), [np.linalg.cholesky]),
    ("norm[vec,1]", "np.linalg.norm(a0, 1)", (distinct_abs(5),), [np.linalg.norm]),
    ("norm[vec,inf]", "np.linalg.norm(a0, np.inf)", (distinct_abs(5),), [np.linalg.norm]),
    ("norm[vec,ord=3]", "np.linalg.norm(a0, ord=3)", (distinct_abs(5),), [np.linalg.norm]),
    ("norm[fro]", "np.linalg.norm(a0, 'fro')", (U(3, 4),), [np.linalg.norm]),
    ("norm[axis=0]", "np.linalg.norm(a0, axis=0)", (U(3, 4),), [np.linalg.norm]),
    ("norm[axis=1]", "np.linalg.norm(a0, axis=1)", (U(3, 4),), [np.linalg.norm]),
    ("norm[ord=1,axis=1]", "np.linalg.norm(a0, ord=1, axis=1)", (distinct_abs(3, 4),), [np.linalg.norm]),
    ("norm[inf,axis=-1]", "np.linalg.norm(a0, np.inf, -1)", (distinct_abs(3, 4),), [np.linalg.norm]),
    ("norm[mat,1]", "np.linalg.norm(a0, 1)", (distinct_abs(3, 4),), [np.linalg.norm]),
    ("norm[mat,inf]", "np.linalg.norm(a0, np.inf)", (distinct_abs(3, 4),), [np.linalg.norm]),
    ("norm[mat,2]", "np.linalg.norm(a0, 2)", (U(4, 3),), [np.linalg.norm]),
    ("norm[nuc]", "np.linalg.norm(a0, 'nuc')", (U(4, 3),), [np.linalg.norm]),
    ("eigh[w]", "np.linalg.eigh(a0)[0]", (spd(4),), [np.linalg.eigh]),
    ("eigh[V]", "np.linalg.eigh(a0)[1]", (spd(4),), [np.linalg.eigh]),
    # eigenvectors are defined up to sign, which differs between LAPACK paths (numba's eigh
    # has no UPLO: target "cpu" decomposes A.T): a sign-invariant function of them
    ("eigh[U,w*V**2]", "np.linalg.eigh(a0, UPLO='U')[1] ** 2 * np.linalg.eigh(a0, UPLO='U')[0]", (spd(4),),
     [np.linalg.eigh]),
    ("qr[Q]", "np.linalg.qr(a0)[0]", (U(5, 3),), [np.linalg.qr]),
    ("qr[R]", "np.linalg.qr(a0)[1]", (U(5, 3),), [np.linalg.qr]),
    ("qr[Q@R,square]", "np.linalg.qr(a0)[0] * np.linalg.qr(a0)[1]", (well(3),), [np.linalg.qr]),
    ("lstsq[vec]", "np.linalg.lstsq(a0, a1, rcond=None)[0]", (U(6, 3), U(6)), [np.linalg.lstsq]),
    ("lstsq[mat]", "np.linalg.lstsq(a0, a1)[0]", (U(6, 3), U(6, 2)), [np.linalg.lstsq]),
    ("solve_triangular[lower]", "sla.solve_triangular(a0, a1, lower=True)", (tri(4, True), U(4)),
     [sla.solve_triangular]),
    ("solve_triangular[upper,mat]", "sla.solve_triangular(a0, a1)", (tri(4, False), U(4, 2)),
     [sla.solve_triangular]),
    ("solve_triangular[trans=1]", "sla.solve_triangular(a0, a1, trans=1, lower=True)",
     (tri(4, True), U(4)), [sla.solve_triangular]),
    ("solve_triangular[T,unit]", "sla.solve_triangular(a0, a1, 'T', False, True)",
     (tri(4, False), U(4, 2)), [sla.solve_triangular]),
    ("cho_solve(cho_factor)", "sla.cho_solve(sla.cho_factor(a0), a1)", (spd(4), U(4)),
     [sla.cho_factor, lrules.cho_solve_parts]),
    ("cho_solve(cho_factor lower)", "sla.cho_solve(sla.cho_factor(a0, lower=True), a1)",
     (spd(4), U(4, 2)), [sla.cho_factor, lrules.cho_solve_parts]),
    ("cho_factor[c]", "sla.cho_factor(a0)[0]", (spd(4),), [sla.cho_factor]),
    ("cho_factor[c,lower]", "sla.cho_factor(a0, lower=True)[0]", (spd(3),), [sla.cho_factor]),
    ("trace", "np.trace(a0)", (U(3, 4),), [np.trace]),
    ("diag[vec]", "np.diag(a0)", (U(4),), [np.diag]),
    ("diag[mat]", "np.diag(a0)", (U(3, 4),), [np.diag]),
    ("diag[mat,k=1]", "np.diag(a0, 1)", (U(3, 4),), [np.diag]),
    ("diag[vec,k=-1]", "np.diag(a0, k=-1)", (U(3),), [np.diag]),
    ("kron[vec]", "np.kron(a0, a1)", (U(3), U(2)), [np.kron]),
    ("kron[mat]", "np.kron(a0, a1)", (U(2, 3), U(3, 2)), [np.kron]),
    ("tensordot[axes=1]", "np.tensordot(a0, a1, axes=1)", (U(3, 4), U(4, 2)), [np.tensordot]),
    ("tensordot[default]", "np.tensordot(a0, a1)", (U(2, 3, 4), U(3, 4)), [np.tensordot]),
    ("tensordot[lists]", "np.tensordot(a0, a1, axes=([0, 2], [1, 0]))", (U(3, 2, 4), U(4, 3, 5)),
     [np.tensordot]),
    ("einsum[matmul]", "np.einsum('ij,jk->ik', a0, a1)", (U(3, 4), U(4, 2)), [np.einsum]),
    ("einsum[inner]", "np.einsum('ij,ij->', a0, a1)", (U(3, 4), U(3, 4)), [np.einsum]),
    ("einsum[trace]", "np.einsum('ii', a0)", (U(3, 3),), [np.einsum]),
    ("einsum[diag]", "np.einsum('ii->i', a0)", (U(3, 3),), [np.einsum]),
    ("einsum[transpose]", "np.einsum('ij->ji', a0)", (U(3, 4),), [np.einsum]),
    ("einsum[rowsum]", "np.einsum('ij->i', a0)", (U(3, 4),), [np.einsum]),
    ("einsum[outer]", "np.einsum('i,j->ij', a0, a1)", (U(3), U(4)), [np.einsum]),
    ("einsum[implicit]", "np.einsum('ij,jk', a0, a1)", (U(3, 4), U(4, 2)), [np.einsum]),
    ("einsum[3 operands]", "np.einsum('ijk,jl,k->il', a0, a1, a2)", (U(2, 3, 4), U(3, 2), U(4)),
     [np.einsum]),
    ("einsum[same operand]", "np.einsum('ij,kj->ik', a0, a0)", (U(3, 4),), [np.einsum]),
]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_linalg_rule(case, target):
    cid, expr, args, _ = case
    check_expr(expr, [a.copy() for a in args], target=target, label=cid)


def test_every_linalg_rule_has_a_case():
    covered = [k for c in CASES for k in c[3]]
    keys = list(lrules.LINALG_RULES) + list(lrules.TUPLE_RULES)
    missing = [getattr(k, "__name__", repr(k)) for k in keys if not any(k is x for x in covered)]
    assert not missing, f"linear algebra rules without a case in tests/test_linalg.py: {missing}"


# --- forward mode -------------------------------------------------------------------------------------
JVP_CASES = [
    ("solve", "np.linalg.solve(a0, a1)", (well(4), U(4, 2))),
    ("inv", "np.linalg.inv(a0)", (well(3),)),
    ("det", "np.linalg.det(a0)", (well(3),)),
    ("slogdet", "np.linalg.slogdet(a0)[1]", (well(3),)),
    ("cholesky", "np.linalg.cholesky(a0)", (spd(4),)),
    ("norm[axis=1]", "np.linalg.norm(a0, axis=1)", (U(3, 4),)),
    ("eigh[w]", "np.linalg.eigh(a0)[0]", (spd(4),)),
    ("eigh[V]", "np.linalg.eigh(a0)[1]", (spd(4),)),
    ("qr[Q]", "np.linalg.qr(a0)[0]", (U(5, 3),)),
    ("qr[R]", "np.linalg.qr(a0)[1]", (U(5, 3),)),
    ("lstsq", "np.linalg.lstsq(a0, a1)[0]", (U(6, 3), U(6))),
    ("solve_triangular", "sla.solve_triangular(a0, a1, lower=True)", (tri(4, True), U(4, 2))),
    ("einsum", "np.einsum('ijk,jl,k->il', a0, a1, a2)", (U(2, 3, 4), U(3, 2), U(4))),
    ("tensordot", "np.tensordot(a0, a1, axes=1)", (U(3, 4), U(4, 2))),
]
_JVP_FNS = {}


def _jvp_fn(expr, nargs):
    import linecache
    src = f"def f({', '.join(f'a{i}' for i in range(nargs))}):\n    return {expr}\n"
    if src not in _JVP_FNS:
        name = f"<zyg-linalg-jvp-{len(_JVP_FNS)}>"
        linecache.cache[name] = (len(src), None, src.splitlines(True), name)
        ns = {"np": np, "sla": sla}
        exec(compile(src, name, "exec"), ns)
        _JVP_FNS[src] = ns["f"]
    return _JVP_FNS[src]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("case", JVP_CASES, ids=[c[0] for c in JVP_CASES])
def test_linalg_jvp(case, target):
    """J @ t against central differences along t, every operand perturbed at once."""
    cid, expr, args = case
    f = _jvp_fn(expr, len(args))
    rng = np.random.default_rng(len(cid))
    ts = tuple(rng.normal(size=a.shape) for a in args)
    y, ty = zyg.jvp(f, tuple(a.copy() for a in args), ts, target=target)
    np.testing.assert_allclose(y, f(*args), rtol=1e-12, atol=1e-12)
    h = 1e-6
    fd = (np.asarray(f(*[a + h * t for a, t in zip(args, ts)]))
          - np.asarray(f(*[a - h * t for a, t in zip(args, ts)]))) / (2 * h)
    np.testing.assert_allclose(ty, fd, rtol=1e-6, atol=1e-7 * max(1.0, float(np.max(np.abs(fd)))))


# --- code as users write it -----------------------------------------------------------------------------
def gauss_nll(mu, L_raw, X):
    """Negative log-likelihood of rows of X under N(mu, S), S = L L^T + I (unpacked tuples,
    a Cholesky solve, slogdet and a loop over samples)."""
    n, d = X.shape
    S = L_raw @ L_raw.T + np.eye(d)
    c, low = sla.cho_factor(S, lower=True)
    sign, logdet = np.linalg.slogdet(S)
    total = 0.0
    for i in range(n):
        r = X[i] - mu
        z = sla.cho_solve((c, low), r)
        total += 0.5 * np.dot(r, z)
    return total + 0.5 * n * logdet


def pca_energy(X):
    C = X.T @ X / X.shape[0]
    w, V = np.linalg.eigh(C)
    top = V[:, -1]
    return w[-1] + np.sum((X @ top) ** 2) / X.shape[0]


def ridge(A, y, lam):
    d = A.shape[1]
    coef = np.linalg.solve(A.T @ A + lam * np.eye(d), A.T @ y)
    Q, R = np.linalg.qr(A)
    x_ls, res, rank, sv = np.linalg.lstsq(A, y, rcond=None)
    return np.sum(coef ** 2) + np.trace(R) ** 2 + np.einsum('i,i->', x_ls, x_ls)


USER = [
    (gauss_nll, (U(3), U(3, 3), U(5, 3)), (0, 1)),
    (pca_energy, (U(8, 3),), (0,)),
    (ridge, (U(7, 3), U(7), 0.3), (0, 1, 2)),
]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("case", USER, ids=[c[0].__name__ for c in USER])
def test_user_functions(case, target):
    from conftest import cached
    f, args, argnums = case
    vg = cached("value_and_grad", f, argnums, target)
    val, grads = vg(*[a.copy() if isinstance(a, np.ndarray) else a for a in args])
    assert abs(val - f(*args)) <= 1e-12 * max(1.0, abs(val))
    h = 1e-6
    for i, g in zip(argnums, grads):
        a = args[i]
        if not isinstance(a, np.ndarray):
            up, dn = list(args), list(args)
            up[i], dn[i] = a + h, a - h
            fd = (f(*up) - f(*dn)) / (2 * h)
            assert abs(g - fd) <= 1e-6 * max(1.0, abs(fd)), (i, g, fd)
            continue
        fd = np.zeros_like(a)
        for idx in np.ndindex(a.shape):
            up, dn = list(args), list(args)
            up[i], dn[i] = a.copy(), a.copy()
            up[i][idx] += h
            dn[i][idx] -= h
            fd[idx] = (f(*up) - f(*dn)) / (2 * h)
        np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-7 * max(1.0, float(np.max(np.abs(fd)))))


# --- what is not differentiable says so, at the user's line ---------------------------------------------
def uses_residuals(A, b):
    x, res, rank, sv = np.linalg.lstsq(A, b, rcond=None)
    return np.sum(res)


def einsum_ellipsis(A):
    return np.sum(np.einsum('...ij->...ji', A))


def qr_complete(A):
    Q, R = np.linalg.qr(A, mode='complete')
    return np.sum(Q)


def complex_solve(A, b):
    return np.sum(np.linalg.solve(A, b)).real


@pytest.mark.parametrize("f,args,what", [
    (uses_residuals, (U(6, 3), U(6)), "only the solution"),
    (einsum_ellipsis, (U(3, 3),), "'...' is not supported"),
    (qr_complete, (U(4, 3),), "mode='reduced'"),
    (complex_solve, (well(3) + 0.1j * U(3, 3), U(3) + 0j), "no complex rule"),
])
def test_errors_name_the_line(f, args, what):
    import inspect
    with pytest.raises(zyg.ZygError) as ei:
        zyg.grad(f, target="python")(*args)
    msg = str(ei.value)
    assert what in msg, msg
    line = inspect.getsourcelines(f)[1] + 1
    assert f"test_linalg.py\", line {line}" in msg or f"test_linalg.py:{line}" in msg, msg


def test_messages_name_np_linalg():
    """The message names np.linalg.solve, not np.solve (which does not exist)."""
    from zyg.ssa.ir import callee_name
    assert callee_name(np.linalg.solve) == "np.linalg.solve"
    assert callee_name(sla.solve_triangular) == "scipy.linalg.solve_triangular"


def test_forward_mode_of_inv_through_a_list():
    # list appends have a forward rule now (issue 23): the jvp through the list is
    # d sum(inv(A)) = -sum(inv(A) dA inv(A))
    def f(A):
        out = []
        out.append(np.sum(np.linalg.inv(A)))
        return out[0]
    A = spd(3)
    dA = np.ones_like(A)
    y, dy = zyg.jvp(f, (A,), (dA,), target="python")
    Ai = np.linalg.inv(A)
    assert y == pytest.approx(np.sum(Ai), rel=1e-12)
    assert dy == pytest.approx(-np.sum(Ai @ dA @ Ai), rel=1e-10)


# --- forward against reverse where the compiled adjoints changed (session 16: cholesky by
# substitution, outer products as broadcast products, slice reads added into views) ---------
def _chol_user(A, z):
    L = np.linalg.cholesky(A)
    return np.sum(np.sin(L @ z)) + np.sum(L * L)


def _window_user(x):
    s = 0.0
    for i in range(x.shape[0] - 2):
        w = x[i:i + 3]
        s += np.sum(w * w) * x[i]
    return s


def _inner_solve_user(a, B):
    return np.sum(np.inner(a, B) ** 2) + np.sum(np.linalg.solve(B @ B.T + 3 * np.eye(3), a) ** 2)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", ["cholesky", "window", "inner_solve"])
def test_forward_and_reverse_agree(name, target):
    rng = np.random.default_rng(3)
    M = rng.normal(size=(3, 3))
    f, args = {"cholesky": (_chol_user, (M @ M.T + 3 * np.eye(3), rng.normal(size=3))),
               "window": (_window_user, (rng.normal(size=7),)),
               "inner_solve": (_inner_solve_user, (rng.normal(size=3), rng.normal(size=(3, 3))))}[name]
    x, rest = args[0], args[1:]
    v = rng.normal(size=x.shape)
    if name == "cholesky":
        v = v + v.T                 # a symmetric direction (the lower triangle is read)
    g = zyg.grad(f, target=target)(*args)
    _, ty = zyg.jvp(f, args, (v,) + tuple(np.zeros_like(r) for r in rest), target=target)
    np.testing.assert_allclose(ty, np.sum(g * v), rtol=1e-12, atol=1e-12)
    if name == "cholesky":
        return                      # second order through cholesky's adjoint has no rule yet
    hv = zyg.hvp(f, x, v, *rest, target=target)
    h = 1e-5
    fd = (zyg.grad(f, target=target)(x + h * v, *rest) - zyg.grad(f, target=target)(x - h * v, *rest)) / (2 * h)
    np.testing.assert_allclose(hv, fd, rtol=1e-7, atol=1e-8 * max(1.0, float(np.max(np.abs(fd)))))
