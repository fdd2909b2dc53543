"""Sparse Jacobians and Hessians by column (or row) colouring (issue 27).

``zyg.jacobian(f, sparsity=P)`` and ``zyg.hessian(f, sparsity=P)``: ``P`` is the pattern of
the derivative matrix (rows: the result's elements, columns: the argument's, both in C
order; a scipy.sparse matrix or a boolean array), given by the user (where zyg cannot see
it, no pattern is assumed: a pattern that leaves out an entry that is not zero gives a
wrong matrix, as with every tool that takes one).

Columns that share no row are *structurally orthogonal*: one Jacobian-vector product with
their sum as the tangent gives all of them, each entry read off its row.  A greedy
colouring of the columns' conflict graph (columns conflict when they share a row) groups
them; a banded matrix of bandwidth ``b`` needs ``2b + 1`` products instead of ``n``, a
block-diagonal one as many as its widest block.  In reverse mode the same is done with
rows (one pullback per group of rows that share no column).  A Hessian is recovered
column by column from Hessian-vector products the same way (direct recovery: symmetry is
not used).  The result is a ``scipy.sparse.csr_matrix`` of the pattern's shape.

``sparsity="detect"``: zyg finds the pattern itself on the first call for given argument
types and shapes (:func:`detected`), and keeps it: the nonzeros of the dense matrix at the
point of the call and at a randomly perturbed point (two dense passes, once).  The pattern
is the one of those points' control flow; every later call therefore checks the sparse
result with one more product along a random direction (a Jacobian-vector or
Hessian-vector product compared with ``M @ v``), and where they differ, the pattern
missed an entry at this point: the matrix is then computed densely here, returned with
the larger pattern, and that pattern kept.  A detected pattern never yields a wrong
matrix silently, short of an entry smaller than 1e-7 of its row's scale.
"""
from __future__ import annotations

from typing import Any, Callable, List, Sequence, Tuple

from collections import OrderedDict

import numpy as np

from .errors import TypeMismatch


def pattern_of(sparsity: Any, shape: Tuple[int, int], what: str):
    """The pattern as a scipy CSC matrix of booleans of this shape."""
    import scipy.sparse as sp
    P = sp.csc_matrix(sparsity, dtype=bool) if not sp.issparse(sparsity) else sparsity.tocsc().astype(bool)
    if P.shape != shape:
        raise TypeMismatch(f"{what}: the sparsity pattern has shape {P.shape}; the derivative "
                           f"here has shape {shape} (result elements x argument elements)")
    P.eliminate_zeros()
    P.sort_indices()
    return P


_COLOURS: "OrderedDict[Any, np.ndarray]" = OrderedDict()
_COLOURS_KEPT = 16


def colour_columns(P) -> np.ndarray:
    """A colour per column of the CSC pattern ``P`` such that columns of one colour share
    no row (greedy, columns with more entries first).  Kept per pattern (a Jacobian taken
    again with the same pattern does not colour it again: that took seconds for
    bundle adjustment's patterns, against milliseconds of passes)."""
    import hashlib
    key = (P.shape, hashlib.blake2b(np.ascontiguousarray(P.indptr).tobytes() +
                                     np.ascontiguousarray(P.indices).tobytes(),
                                     digest_size=16).hexdigest())
    got = _COLOURS.get(key)
    if got is not None:
        _COLOURS.move_to_end(key)
        return got
    got = _colour_columns(P)
    got.setflags(write=False)
    _COLOURS[key] = got
    while len(_COLOURS) > _COLOURS_KEPT:
        _COLOURS.popitem(last=False)
    return got


def _colour_columns(P) -> np.ndarray:
    import scipy.sparse as sp
    R = sp.csr_matrix(P)
    order = np.argsort(-np.diff(P.indptr), kind="stable")
    return _greedy()(np.ascontiguousarray(P.indptr, np.int64), np.ascontiguousarray(P.indices, np.int64),
                     np.ascontiguousarray(R.indptr, np.int64), np.ascontiguousarray(R.indices, np.int64),
                     order.astype(np.int64))


_GREEDY: List[Callable] = []


def _greedy() -> Callable:
    """The greedy colouring, compiled (in Python it took 4.5 s for bundle adjustment's
    8,000 x 32,000 pattern; compiled, milliseconds): column ``j`` (in ``order``) gets the
    smallest colour no column sharing a row with it has yet."""
    if not _GREEDY:
        import numba

        @numba.njit(cache=True, nogil=True)
        def greedy(indptr, indices, rindptr, rindices, order):
            n = indptr.shape[0] - 1
            colour = np.full(n, -1, np.int64)
            seen = np.full(n + 1, -1, np.int64)     # seen[c] == j: a neighbour of j has colour c
            for j in order:
                for a in range(indptr[j], indptr[j + 1]):
                    r = indices[a]
                    for b in range(rindptr[r], rindptr[r + 1]):
                        ck = colour[rindices[b]]
                        if ck >= 0:
                            seen[ck] = j
                c = 0
                while seen[c] == j:
                    c += 1
                colour[j] = c
            return colour
        _GREEDY.append(greedy)
    return _GREEDY[0]


def by_columns(P, product: Callable[[np.ndarray], np.ndarray], products=None, chunk: int = 32):
    """The matrix of pattern ``P`` (CSC) from ``product(v) = M @ v`` over colour groups;
    with ``products(V) = (M @ V.T).T`` (``V``: one colour's seed per row) ``chunk``
    colours per call (the vector forward mode)."""
    import scipy.sparse as sp
    m, n = P.shape
    colour = colour_columns(P)
    vals = np.zeros(P.nnz)
    ncol = int(colour.max()) + 1 if n else 0
    got = {}
    if products is not None:
        for c0 in range(0, ncol, chunk):
            k = min(chunk, ncol - c0)
            V = np.zeros((k, n))
            for c in range(c0, c0 + k):
                V[c - c0, colour == c] = 1.0
            MV = np.reshape(products(V), (k, m))
            for c in range(c0, c0 + k):
                got[c] = MV[c - c0]
    if products is None:
        for c in range(ncol):
            v = np.zeros(n)
            v[colour == c] = 1.0
            got[c] = np.ravel(product(v))
    if ncol:
        # entry e of column j in row r is the product of j's colour, at r
        G = np.stack([got[c] for c in range(ncol)])
        of_entry = np.repeat(colour, np.diff(P.indptr))
        vals = G[of_entry, P.indices]
    out = sp.csc_matrix((vals, P.indices.copy(), P.indptr.copy()), shape=(m, n)).tocsr()
    out.passes = int(colour.max()) + 1 if n else 0      # products computed (a measurement)
    return out


def by_rows(P, vproduct: Callable[[np.ndarray], np.ndarray]):
    """The matrix of pattern ``P`` from ``vproduct(u) = u @ M`` over groups of rows that
    share no column."""
    t = by_columns(P.T.tocsc(), vproduct)
    out = t.T.tocsr()
    out.passes = t.passes
    return out


def jacobian(fn: Callable, args: Sequence[Any], i: int, sparsity: Any, mode: str, target: str,
             jvp: Callable, pullback: Callable, chunk: int = 32):
    """The sparse Jacobian of ``fn`` at ``args`` w.r.t. argument ``i``."""
    x = args[i]
    xs = np.shape(x)
    n_in = int(np.prod(xs)) if xs else 1
    # the result's size is the pattern's row count (checked against the first pass): the
    # function is never run as plain Python to learn it (seconds on large models)
    n_out = int(np.shape(sparsity)[0]) if len(np.shape(sparsity)) == 2 else -1
    P = pattern_of(sparsity, (n_out, n_in), "jacobian")
    dtype = np.asarray(x).dtype

    def sized(y, what: str):
        if np.size(y) != n_out:
            raise TypeMismatch(f"jacobian: the sparsity pattern has {n_out} rows; the result "
                               f"here has {np.size(y)} elements ({what})")

    def column_product(v: np.ndarray) -> np.ndarray:
        t: List[Any] = [None] * len(args)
        t[i] = v.reshape(xs).astype(dtype) if xs else float(v[0])
        y, ty = jvp(fn, args, tuple(t), target=target)
        sized(y, "forward pass")
        return np.ravel(ty)

    def column_products(V: np.ndarray) -> np.ndarray:
        # all colours' seeds in one vector forward pass (jvp(batched=True))
        k = V.shape[0]
        t: List[Any] = [None] * len(args)
        t[i] = V.reshape((k,) + xs).astype(dtype) if xs else V[:, 0].astype(np.float64)
        y, ty = jvp(fn, args, tuple(t), target=target, batched=True)
        sized(y, "forward pass")
        return np.reshape(ty, (k, -1))

    def row_product(u: np.ndarray) -> np.ndarray:
        fresh = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
        y, back = pullback(fn, *fresh, target=target)
        sized(y, "reverse pass")
        ys = np.shape(y)
        g = back(u.reshape(ys).astype(np.asarray(y).dtype) if ys else float(u[0]))[i]
        return np.zeros(n_in) if g is None else np.ravel(g)

    if mode == "auto":
        # the direction needing fewer passes: colours of the columns or of the rows
        nc = int(colour_columns(P).max()) + 1 if n_in else 0
        nr = int(colour_columns(P.T.tocsc()).max()) + 1 if n_out else 0
        mode = "fwd" if nc <= nr else "rev"
    if mode == "fwd":
        return by_columns(P, column_product, column_products, chunk)
    return by_rows(P, row_product)


DETECT = "detect"
_DETECTED: "OrderedDict[Any, Any]" = OrderedDict()
_DETECTED_KEPT = 64
GUARD_RTOL = 1e-7


def _shapes(args: Sequence[Any]) -> tuple:
    return tuple((a.dtype.str, a.shape) if isinstance(a, np.ndarray) else type(a).__name__
                 for a in args)


def _perturbed(args: Sequence[Any], i: int, rng) -> tuple:
    x = args[i]
    if isinstance(x, np.ndarray):
        x2 = (x + 1e-3 * (np.abs(x) + 1.0) * rng.standard_normal(x.shape)).astype(x.dtype)
    else:
        x2 = float(x) + 1e-3 * (abs(float(x)) + 1.0) * float(rng.standard_normal())
    return tuple(args[:i]) + (x2,) + tuple(args[i + 1:])


def _with_pattern(M: np.ndarray, P) -> Any:
    """``M``'s entries on pattern ``P`` (a boolean array) as a csr_matrix."""
    import scipy.sparse as sp
    rows, cols = np.nonzero(P)
    return sp.csr_matrix((M[rows, cols], (rows, cols)), shape=P.shape)


def detected(key: Any, args: Sequence[Any], i: int, shape: Tuple[int, int], dense: Callable,
             given: Callable, product: Callable):
    """The sparse matrix (``shape``) of a detected pattern.

    ``dense(args)``: the dense matrix at ``args``; ``given(P)``: the sparse matrix computed
    with pattern ``P`` (by colouring); ``product(v)``: the matrix times ``v`` by one
    derivative pass (the check).  ``key`` names the function, the argument and the
    argument types and shapes the pattern is kept for."""
    import scipy.sparse as sp
    P = _DETECTED.get(key)
    rng = np.random.default_rng()
    if P is None:
        M = np.reshape(dense(args), shape)
        found = M != 0                       # nan and inf entries count as entries
        try:
            found |= np.reshape(dense(_perturbed(args, i, rng)), shape) != 0
        except (ArithmeticError, ValueError):
            pass                            # the perturbed point is outside f's domain
        _keep(key, sp.csc_matrix(found))
        return _with_pattern(M, found)
    _DETECTED.move_to_end(key)
    out = given(P)
    v = rng.standard_normal(shape[1])
    mv = np.ravel(product(v))
    ref = out @ v
    with np.errstate(invalid="ignore", over="ignore"):
        scale = abs(out) @ np.abs(v) + np.abs(mv)
        fin = np.isfinite(mv) & np.isfinite(ref)
        if np.array_equal(np.isfinite(mv), np.isfinite(ref)) and \
                np.all(np.abs(mv - ref)[fin] <= GUARD_RTOL * scale[fin]):
            return out
    # the pattern missed an entry at this point (another branch taken): dense here, and
    # the larger pattern kept
    M = np.reshape(dense(args), shape)
    found = P.toarray() | (M != 0)
    _keep(key, sp.csc_matrix(found))
    return _with_pattern(M, found)


def _keep(key: Any, P) -> None:
    _DETECTED[key] = P
    while len(_DETECTED) > _DETECTED_KEPT:
        _DETECTED.popitem(last=False)


def hessian(hvp: Callable, n: int, sparsity: Any, hvps=None, chunk: int = 32):
    """The sparse Hessian (``n x n``) from ``hvp(v) = H @ v`` (or ``hvps(V) = (H @ V.T).T``,
    ``chunk`` colours per call: the vector forward mode over the gradient)."""
    return by_columns(pattern_of(sparsity, (n, n), "hessian"), hvp, hvps, chunk)
