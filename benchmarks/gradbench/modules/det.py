"""GradBench ``det``: the determinant of an ``ell x ell`` matrix by expansion in minors
(the recursion of cmpad's ``det_by_minor``: ``r`` and ``c`` are linked lists of the
rows and columns left), and its gradient w.r.t. the matrix (row-major, flat)."""
import numba
import numpy as np
import zyg

from benchmarks.gradbench.common import Module


@numba.njit
def det_of_minor(a, n, m, r, c):
    r0 = r[n]
    cj = c[n]
    if m == 1:
        return a[r0 * n + cj]
    detm = 0.0
    sign = 1
    r[n] = r[r0]
    cj1 = n
    for j in range(m):
        m0j = a[r0 * n + cj]
        c[cj1] = c[cj]
        dets = det_of_minor(a, n, m - 1, r, c)
        c[cj1] = cj
        if sign > 0:
            detm = detm + m0j * dets
        else:
            detm = detm - m0j * dets
        cj1 = cj
        cj = c[cj]
        sign = -sign
    r[n] = r0
    return detm


def det(a, ell):
    r = np.zeros(ell + 1, dtype=np.int64)
    c = np.zeros(ell + 1, dtype=np.int64)
    for i in range(ell):
        r[i] = i + 1
        c[i] = i + 1
    return det_of_minor(a, ell, ell, r, c)


def make(target):
    m = Module(target)
    f = numba.njit(det) if target == "cpu" else det
    g = zyg.grad(det, target=target)
    pre = lambda raw: (np.asarray(raw["A"], dtype=np.float64), int(raw["ell"]))
    m.functions["primal"] = (pre, f, float)
    m.functions["gradient"] = (pre, g, lambda r: r.tolist())
    a = np.arange(9.0) ** 2
    m.warm_up = lambda: (f(a, 3), g(a, 3))
    return m
