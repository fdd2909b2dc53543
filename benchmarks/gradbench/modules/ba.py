"""GradBench ``ba``: bundle adjustment. ``objective`` gives the reprojection errors
(2 per observation) and the weight errors ``1 - w_i^2``; ``jacobian`` is the sparse
Jacobian of all ``3p`` residuals w.r.t. all ``11n + 3m + p`` parameters (cameras,
points, weights), computed by ``zyg.jacobian(..., sparsity=P)``: ``P`` is the
block pattern (each reprojection row depends on one camera, one point and one
weight), so the columns are grouped by colouring and a handful of forward passes
give the whole matrix. GradBench sends one camera, point, weight and feature and
the sizes; the problem repeats them (observation ``i`` sees camera ``i % n`` and
point ``i % m``), and the answers are sent back in GradBench's abbreviated form
(the first two rows of the reprojection block and the last weight row)."""
import math

import numpy as np
import scipy.sparse as sp
import zyg

from benchmarks.gradbench.common import Module, primal

NCAM = 11


def residuals(params, n, m, obs, feats):
    p = obs.shape[0]
    out = np.empty(3 * p)
    xo = np.empty(3)
    for i in range(p):
        c = obs[i, 0] * NCAM
        x = n * NCAM + obs[i, 1] * 3
        wi = params[n * NCAM + m * 3 + i]
        for j in range(3):
            xo[j] = params[x + j] - params[c + 3 + j]
        r0 = params[c]
        r1 = params[c + 1]
        r2 = params[c + 2]
        sqtheta = r0 * r0 + r1 * r1 + r2 * r2
        if sqtheta != 0.0:
            theta = math.sqrt(sqtheta)
            ct = math.cos(theta)
            st = math.sin(theta)
            w0 = r0 / theta
            w1 = r1 / theta
            w2 = r2 / theta
            tmp = (w0 * xo[0] + w1 * xo[1] + w2 * xo[2]) * (1.0 - ct)
            x0 = xo[0] * ct + (w1 * xo[2] - w2 * xo[1]) * st + w0 * tmp
            x1 = xo[1] * ct + (w2 * xo[0] - w0 * xo[2]) * st + w1 * tmp
            x2 = xo[2] * ct + (w0 * xo[1] - w1 * xo[0]) * st + w2 * tmp
        else:
            x0 = xo[0] + (r1 * xo[2] - r2 * xo[1])
            x1 = xo[1] + (r2 * xo[0] - r0 * xo[2])
            x2 = xo[2] + (r0 * xo[1] - r1 * xo[0])
        p0 = x0 / x2
        p1 = x1 / x2
        rsq = p0 * p0 + p1 * p1
        big_l = 1.0 + params[c + 9] * rsq + params[c + 10] * rsq * rsq
        p0 = p0 * big_l * params[c + 6] + params[c + 7]
        p1 = p1 * big_l * params[c + 6] + params[c + 8]
        out[2 * i] = wi * (p0 - feats[i, 0])
        out[2 * i + 1] = wi * (p1 - feats[i, 1])
        out[2 * p + i] = 1.0 - wi * wi
    return out


def pre(raw):
    n, m, p = int(raw["n"]), int(raw["m"]), int(raw["p"])
    params = np.concatenate([np.tile(np.asarray(raw["cam"], np.float64), n),
                             np.tile(np.asarray(raw["x"], np.float64), m),
                             np.full(p, float(raw["w"]))])
    i = np.arange(p)
    obs = np.stack([i % n, i % m], axis=1).astype(np.int64)
    feats = np.tile(np.asarray(raw["feat"], np.float64), (p, 1))
    return params, n, m, obs, feats


def pattern(n, m, obs):
    """The Jacobian's pattern (3p x (11n + 3m + p)), CSR with sorted columns."""
    p = obs.shape[0]
    cols = np.concatenate([obs[:, :1] * NCAM + np.arange(NCAM),
                           NCAM * n + obs[:, 1:2] * 3 + np.arange(3),
                           (NCAM * n + 3 * m + np.arange(p))[:, None]], axis=1)
    rows = np.repeat(np.arange(2 * p).reshape(p, 2), 15, axis=1).reshape(-1)
    cc = np.repeat(cols, 2, axis=0).reshape(-1)
    rows = np.concatenate([rows, 2 * p + np.arange(p)])
    cc = np.concatenate([cc, NCAM * n + 3 * m + np.arange(p)])
    P = sp.csr_matrix((np.ones(rows.size, bool), (rows, cc)), shape=(3 * p, NCAM * n + 3 * m + p))
    P.sort_indices()
    return P


def abbreviated(J, P):
    """GradBench's form: the first 30 entries of the CSR arrays and the last one."""
    J = J.tocsr()
    k = 2 * (NCAM + 4)
    cols = list(P.indices[:k]) + [int(P.indices[-1])]
    rr = np.repeat(np.arange(P.shape[0]), np.diff(P.indptr))
    rows_of = list(rr[:k]) + [int(rr[-1])]
    vals = [float(J[r, c]) for r, c in zip(rows_of, cols)]
    return {"rows": [int(v) for v in P.indptr[:k]] + [int(P.indptr[-1])],
            "cols": [int(c) for c in cols], "vals": vals}


def make(target):
    mod = Module(target)
    f = primal(residuals, target)

    def objective(params, n, m, obs, feats):
        return f(params, n, m, obs, feats), obs.shape[0]

    def obj_post(r):
        out, p = r
        return {"reproj_error": {"elements": out[:2].tolist(), "repeated": p},
                "w_err": {"element": float(out[2 * p]), "repeated": p}}

    def jac_pre(raw):
        args = pre(raw)
        P = pattern(args[1], args[2], args[3])
        return (zyg.jacobian(residuals, sparsity=P, mode="fwd", target=target), P) + args

    def jacobian(j, P, *args):
        return j(*args), P

    mod.functions["objective"] = (pre, objective, obj_post)
    mod.functions["jacobian"] = (jac_pre, jacobian, lambda r: abbreviated(*r))
    small = {"n": 2, "m": 3, "p": 5, "cam": [0.1, -0.2, 0.3, 1.0, 2.0, 3.0, 5.0, 0.1, 0.2, 0.01, 0.001],
             "x": [3.0, 1.0, -2.0], "w": 0.8, "feat": [0.5, -0.5]}
    mod.warm_up = lambda: (objective(*pre(small)), jacobian(*jac_pre(small)))
    return mod
