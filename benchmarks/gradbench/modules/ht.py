"""GradBench ``ht``: hand tracking (ADBench). A skinned hand model posed by 26
parameters ``theta`` (global rotation and translation, then finger joint angles);
the residuals are the data points minus their corresponding model points: a vertex
(``simple``) or a point of a triangle at barycentric coordinates ``us`` (2 per point,
``complicated``). ``jacobian`` is dense in ``theta`` (``zyg.jacobian``, argnums 0) and,
in the complicated variant, block-diagonal in ``us`` (each point's 3 residuals depend
on its own 2 coordinates): ``zyg.jacobian(argnums=1, sparsity=P)`` computes it in two
passes, sent back as GradBench's two compressed columns before the 26 of ``theta``."""
import math

import numpy as np
import scipy.sparse as sp
import zyg

from benchmarks.gradbench.common import Module, primal


def residuals(theta, us, base_rel, parents, inv_base_abs, base_pos, weights, mirrored,
              corr, points, triangles, complicated):
    nb = base_rel.shape[0]
    nv = base_pos.shape[1]
    # pose parameters: 3 x (nb + 3)
    pose = np.zeros((3, nb + 3))
    for i in range(3):
        pose[i, 0] = theta[i]
        pose[i, 1] = 1.0
        pose[i, 2] = theta[3 + i]
    it = 6
    ip = 5
    for finger in range(5):
        for k in range(2, 5):
            pose[0, ip] = theta[it]
            it += 1
            if k == 2:
                pose[1, ip] = theta[it]
                it += 1
            ip += 1
        ip += 1
    # posed relatives, absolutes and transforms of the bones
    absolutes = np.zeros((nb, 4, 4))
    transforms = np.zeros((nb, 4, 4))
    tr = np.zeros((4, 4))
    rel = np.zeros((4, 4))
    for b in range(nb):
        tx = pose[0, b + 3]
        tz = pose[1, b + 3]
        ty = pose[2, b + 3]
        cx, sx = math.cos(tx), math.sin(tx)
        cy, sy = math.cos(ty), math.sin(ty)
        cz, sz = math.cos(tz), math.sin(tz)
        # R = Rz Ry Rx
        tr[0, 0] = cz * cy
        tr[0, 1] = -sz * cx + cz * sy * sx
        tr[0, 2] = sz * sx + cz * sy * cx
        tr[1, 0] = sz * cy
        tr[1, 1] = cz * cx + sz * sy * sx
        tr[1, 2] = -cz * sx + sz * sy * cx
        tr[2, 0] = -sy
        tr[2, 1] = cy * sx
        tr[2, 2] = cy * cx
        for i in range(3):
            tr[i, 3] = 0.0
            tr[3, i] = 0.0
        tr[3, 3] = 1.0
        for i in range(4):
            for j in range(4):
                s = 0.0
                for k in range(4):
                    s += base_rel[b, i, k] * tr[k, j]
                rel[i, j] = s
        p = parents[b]
        for i in range(4):
            for j in range(4):
                if p == -1:
                    absolutes[b, i, j] = rel[i, j]
                else:
                    s = 0.0
                    for k in range(4):
                        s += absolutes[p, i, k] * rel[k, j]
                    absolutes[b, i, j] = s
        for i in range(4):
            for j in range(4):
                s = 0.0
                for k in range(4):
                    s += absolutes[b, i, k] * inv_base_abs[b, k, j]
                transforms[b, i, j] = s
    # skinning
    pos = np.zeros((3, nv))
    for b in range(nb):
        for v in range(nv):
            wv = weights[b, v]
            for i in range(3):
                s = 0.0
                for k in range(4):
                    s += transforms[b, i, k] * base_pos[k, v]
                pos[i, v] += s * wv
    if mirrored:
        for v in range(nv):
            pos[0, v] = -pos[0, v]
    # global rotation (angle-axis) and translation
    a0 = pose[0, 0]
    a1 = pose[1, 0]
    a2 = pose[2, 0]
    norm = math.sqrt(a0 * a0 + a1 * a1 + a2 * a2)
    rot = np.zeros((3, 3))
    if norm < 0.0001:
        for i in range(3):
            rot[i, i] = 1.0
    else:
        x = a0 / norm
        y = a1 / norm
        z = a2 / norm
        s = math.sin(norm)
        c = math.cos(norm)
        rot[0, 0] = x * x + (1 - x * x) * c
        rot[0, 1] = x * y * (1 - c) - z * s
        rot[0, 2] = x * z * (1 - c) + y * s
        rot[1, 0] = x * y * (1 - c) + z * s
        rot[1, 1] = y * y + (1 - y * y) * c
        rot[1, 2] = y * z * (1 - c) - x * s
        rot[2, 0] = x * z * (1 - c) - y * s
        rot[2, 1] = z * y * (1 - c) + x * s
        rot[2, 2] = z * z + (1 - z * z) * c
    npts = corr.shape[0]
    err = np.empty(3 * npts)
    g = np.empty(3)
    for n in range(npts):
        for j in range(3):
            if complicated:
                t = corr[n]
                u0 = us[n, 0]
                u1 = us[n, 1]
                v0 = triangles[t, 0]
                v1 = triangles[t, 1]
                v2 = triangles[t, 2]
                hp = 0.0
                for k in range(3):
                    q0 = rot[j, k] * pose[k, 1] * pos[k, v0]
                    q1 = rot[j, k] * pose[k, 1] * pos[k, v1]
                    q2 = rot[j, k] * pose[k, 1] * pos[k, v2]
                    hp += u0 * q0 + u1 * q1 + (1.0 - u0 - u1) * q2
                g[j] = hp + pose[j, 2]
            else:
                v = corr[n]
                hp = 0.0
                for k in range(3):
                    hp += rot[j, k] * pose[k, 1] * pos[k, v]
                g[j] = hp + pose[j, 2]
            err[3 * n + j] = points[n, j] - g[j]
    return err


def pre(raw):
    data, model = raw["data"], raw["data"]["model"]
    f = lambda v: np.ascontiguousarray(np.asarray(v, dtype=np.float64))
    corr = np.asarray(data["correspondences"], dtype=np.int64)
    us = f(raw.get("us") or np.zeros((0, 2)))
    complicated = us.shape[0] > 0
    if not complicated:
        us = np.zeros((corr.shape[0], 2))
    tri = np.asarray(model["triangles"], dtype=np.int64).reshape(-1, 3)
    return (f(raw["theta"]), us.reshape(-1, 2), f(model["base_relatives"]),
            np.asarray(model["parents"], dtype=np.int64), f(model["inverse_base_absolutes"]),
            f(np.asarray(model["base_positions"]).T), f(np.asarray(model["weights"]).T),
            bool(model["is_mirrored"]), corr, f(data["points"]).reshape(-1, 3), tri,
            complicated)


def us_pattern(npts):
    rows = np.arange(3 * npts)
    r = np.repeat(rows, 2)
    c = np.stack([2 * (rows // 3), 2 * (rows // 3) + 1], axis=1).reshape(-1)
    return sp.csr_matrix((np.ones(r.size, bool), (r, c)), shape=(3 * npts, 2 * npts))


def make(target):
    mod = Module(target)
    f = primal(residuals, target)
    jt = zyg.jacobian(residuals, argnums=0, target=target)
    cache = {}

    def jacobian(*args):
        J = jt(*args)
        if not args[-1]:
            return J
        npts = args[8].shape[0]
        if npts not in cache:
            cache[npts] = zyg.jacobian(residuals, argnums=1, sparsity=us_pattern(npts),
                                       target=target)
        Ju = cache[npts](*args).tocsr()
        rows = np.arange(3 * npts)
        du0 = np.asarray(Ju[rows, 2 * (rows // 3)]).ravel()
        du1 = np.asarray(Ju[rows, 2 * (rows // 3) + 1]).ravel()
        return np.concatenate([du0[:, None], du1[:, None], J], axis=1)

    mod.functions["objective"] = (pre, f, lambda r: r.tolist())
    mod.functions["jacobian"] = (pre, jacobian, lambda r: r.tolist())

    def warm_up():
        rng = np.random.default_rng(0)
        nb, nv = 22, 6
        base = np.tile(np.eye(4), (nb, 1, 1))
        parents = np.arange(-1, nb - 1)
        args = (rng.normal(size=26) * 0.1, rng.random((2, 2)), base, parents, base.copy(),
                np.vstack([rng.normal(size=(3, nv)), np.ones(nv)]), rng.random((nb, nv)),
                True, np.array([0, 1]), rng.normal(size=(2, 3)), np.array([[0, 1, 2], [3, 4, 5]]))
        f(*args, True)
        jacobian(*args, True)
        jacobian(*args, False)
    mod.warm_up = warm_up
    return mod
