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
