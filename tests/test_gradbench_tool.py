"""The GradBench tool (benchmarks/gradbench/zyg_tool.py) through its protocol: one tool
process, JSON messages in and responses out, on the smallest input of each eval;
answers checked against numpy references of the evals' definitions (closed forms or
central differences of the reference), not against the tool's own code. The
evaluation against GradBench's own evals and their C++ reference is
benchmarks/gradbench/run_local.py (it needs a GradBench checkout)."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOL = os.path.join(ROOT, "benchmarks", "gradbench", "zyg_tool.py")
LONG = os.environ.get("ZYG_LONG_TESTS") == "1"
RUNS = {"min_runs": 1, "min_seconds": 0}


class Tool:
    def __init__(self, target="cpu"):
        env = dict(os.environ)
        env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
        self.p = subprocess.Popen([sys.executable, TOOL, "--target", target], cwd=ROOT, env=env,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.id = 0
        self.defined = set()

    def send(self, message):
        message = {"id": self.id} | message
        self.id += 1
        self.p.stdin.write(json.dumps(message) + "\n")
        self.p.stdin.flush()
        response = json.loads(self.p.stdout.readline())
        assert response["id"] == message["id"]
        return response

    def evaluate(self, module, function, inp):
        if module not in self.defined:
            r = self.send({"kind": "define", "module": module})
            assert r["success"], r.get("error")
            assert r["timings"][0]["name"] == "compile"
            self.defined.add(module)
        r = self.send({"kind": "evaluate", "module": module, "function": function,
                       "input": inp | RUNS if isinstance(inp, dict) else inp})
        assert r["success"], r.get("error")
        assert r["timings"] and all(t["name"] == "evaluate" for t in r["timings"])
        return r["output"]

    def close(self):
        self.p.stdin.close()
        self.p.wait(timeout=30)


@pytest.fixture(scope="module")
def tool():
    t = Tool()
    r = t.send({"kind": "start", "eval": "test"})
    assert r["tool"] == "zyg"
    yield t
    t.close()


def fd(f, x, h=1e-6):
    x = np.array(x, dtype=np.float64)
    g = np.empty_like(x)
    for i in np.ndindex(x.shape):
        xp, xm = x.copy(), x.copy()
        xp[i] += h
        xm[i] -= h
        g[i] = (f(xp) - f(xm)) / (2 * h)
    return g


def close(a, b, rtol=1e-6, atol=1e-8):
    np.testing.assert_allclose(np.asarray(a, dtype=np.float64), np.asarray(b), rtol=rtol, atol=atol)


def test_protocol_acknowledges_other_kinds_and_refuses_unknown_modules(tool):
    assert tool.send({"kind": "analysis", "of": 0, "valid": True}) == {"id": tool.id - 1}
    r = tool.send({"kind": "define", "module": "nonexistent"})
    assert r["success"] is False and "nonexistent" in r["error"]


def test_hello(tool):
    assert tool.evaluate("hello", "square", 3.0) == 9.0
    assert tool.evaluate("hello", "double", 3.0) == 6.0


def test_lse(tool):
    x = np.random.default_rng(1).random(50)
    close(tool.evaluate("lse", "primal", {"x": x.tolist()}), np.log(np.exp(x).sum()))
    close(tool.evaluate("lse", "gradient", {"x": x.tolist()}), np.exp(x) / np.exp(x).sum())


def test_llsq(tool):
    rng = np.random.default_rng(2)
    x, n = rng.random(8), 16
    t = -1 + np.arange(n) * 2 / (n - 1)
    V = t[:, None] ** np.arange(8)[None, :]
    r = np.sign(t) - V @ x
    close(tool.evaluate("llsq", "primal", {"x": x.tolist(), "n": n}), 0.5 * r @ r)
    close(tool.evaluate("llsq", "gradient", {"x": x.tolist(), "n": n}), -V.T @ r)


def ode_ref(x, s):
    h, y = 2.0 / s, np.zeros_like(x)
    f = lambda y: np.concatenate([x[:1], x[1:] * y[:-1]])
    for _ in range(s):
        k1 = f(y)
        k2 = f(y + h * k1 / 2)
        k3 = f(y + h * k2 / 2)
        k4 = f(y + h * k3)
        y = y + h * (k1 + 2 * k2 + 2 * k3 + k4) / 6
    return y


def test_ode(tool):
    x, s = np.random.default_rng(3).random(10), 3
    close(tool.evaluate("ode", "primal", {"x": x.tolist(), "s": s}), ode_ref(x, s))
    close(tool.evaluate("ode", "gradient", {"x": x.tolist(), "s": s}),
          fd(lambda x: ode_ref(x, s)[-1], x), rtol=1e-5)


def test_det(tool):
    A = np.random.default_rng(4).random((4, 4))
    inp = {"A": A.ravel().tolist(), "ell": 4}
    close(tool.evaluate("det", "primal", inp), np.linalg.det(A))
    close(tool.evaluate("det", "gradient", inp), (np.linalg.det(A) * np.linalg.inv(A).T).ravel())


def test_kmeans(tool):
    P = np.random.default_rng(5).random((40, 3))
    C = P[-4:]
    inp = {"points": P.tolist(), "centroids": C.tolist()}
    d2 = ((P[:, None, :] - C[None, :, :]) ** 2).sum(-1)
    close(tool.evaluate("kmeans", "cost", inp), d2.min(1).sum())
    a = d2.argmin(1)
    mean = np.stack([P[a == j].mean(0) for j in range(4)])
    close(tool.evaluate("kmeans", "dir", inp), C - mean)


def gmm_ref(alpha, mu, q, l, x, gamma, m):
    """The log posterior as GradBench's naive definition has it (densities)."""
    from scipy.special import multigammaln
    k, d = mu.shape
    lik = 0.0
    phi = np.exp(alpha) / np.exp(alpha).sum()
    Qs = []
    for j in range(k):
        Q = np.diag(np.exp(q[j]))
        Q[np.tril_indices(d, -1)[1], np.tril_indices(d, -1)[0]] = 0
        rows, cols = [], []
        for c in range(d):
            for r in range(c + 1, d):
                rows.append(r)
                cols.append(c)
        Q[rows, cols] = l[j]
        Qs.append(Q)
    for xi in x:
        s = 0.0
        for j in range(k):
            S = Qs[j].T @ Qs[j]
            z = xi - mu[j]
            s += phi[j] * np.exp(-0.5 * z @ S @ z) / np.sqrt((2 * np.pi) ** d / np.linalg.det(S))
        lik += np.log(s)
    n_w = d + m + 1
    prior = 0.0
    for j in range(k):
        S = Qs[j].T @ Qs[j]
        V = np.eye(d) / gamma ** 2
        prior += ((n_w - d - 1) / 2 * np.log(np.linalg.det(S)) - np.trace(np.linalg.inv(V) @ S) / 2
                  - (d * n_w / 2) * np.log(2) - n_w / 2 * np.log(np.linalg.det(V))
                  - multigammaln(n_w / 2, d))
    return lik + prior


def test_gmm(tool):
    rng = np.random.default_rng(6)
    d, k, n = 3, 2, 5
    inp = {"d": d, "k": k, "n": n, "m": 1, "gamma": 1.5,
           "alpha": rng.normal(size=k).tolist(), "mu": rng.random((k, d)).tolist(),
           "q": rng.normal(size=(k, d)).tolist(), "l": rng.normal(size=(k, 3)).tolist(),
           "x": rng.normal(size=(n, d)).tolist()}
    arrs = [np.array(inp[key]) for key in ("alpha", "mu", "q", "l")]
    x = np.array(inp["x"])
    ref = lambda *a: gmm_ref(*a, x, 1.5, 1)
    close(tool.evaluate("gmm", "objective", inp), ref(*arrs), rtol=1e-9)
    out = tool.evaluate("gmm", "jacobian", inp)
    for i, key in enumerate(("alpha", "mu", "q", "l")):
        def f(v, i=i):
            a = list(arrs)
            a[i] = v
            return ref(*a)
        close(out[key], fd(f, arrs[i]), rtol=1e-5, atol=1e-6)


def lstm_ref(main, extra, state, seq):
    sig = lambda z: 1 / (1 + np.exp(-z))
    nl, b = main.shape[0] // 2, seq.shape[1]
    h, c = state[0::2].copy(), state[1::2].copy()
    total = 0.0
    for t in range(seq.shape[0] - 1):
        inp = seq[t] * extra[0]
        for i in range(nl):
            w, bias = main[2 * i].reshape(4, b), main[2 * i + 1].reshape(4, b)
            f = sig(inp * w[0] + bias[0])
            ig = sig(h[i] * w[1] + bias[1])
            o = sig(inp * w[2] + bias[2])
            ch = np.tanh(h[i] * w[3] + bias[3])
            c[i] = c[i] * f + ig * ch
            h[i] = o * np.tanh(c[i])
            inp = h[i]
        y = inp * extra[1] + extra[2]
        total += seq[t + 1] @ (y - np.log(np.exp(y).sum() + 2))
    return -total / ((seq.shape[0] - 1) * b)


def test_lstm(tool):
    rng = np.random.default_rng(7)
    l, b, c = 2, 3, 5
    main, extra = rng.random((2 * l, 4 * b)), rng.random((3, b))
    state, seq = rng.random((2 * l, b)), (rng.random((c, b)) > 0.5).astype(float)
    inp = {"main_params": main.tolist(), "extra_params": extra.tolist(),
           "state": state.tolist(), "sequence": seq.tolist()}
    close(tool.evaluate("lstm", "objective", inp), lstm_ref(main, extra, state, seq), rtol=1e-10)
    g = np.concatenate([fd(lambda v: lstm_ref(v, extra, state, seq), main).ravel(),
                        fd(lambda v: lstm_ref(main, v, state, seq), extra).ravel()])
    close(tool.evaluate("lstm", "jacobian", inp), g, rtol=1e-5, atol=1e-8)


def rodrigues(r, X):
    th = np.linalg.norm(r)
    w = r / th
    return X * np.cos(th) + np.cross(w, X) * np.sin(th) + w * (w @ X) * (1 - np.cos(th))


def ba_ref(v, n, m, p, feat):
    cams, X, w = v[:11 * n].reshape(n, 11), v[11 * n:11 * n + 3 * m].reshape(m, 3), v[11 * n + 3 * m:]
    out = np.empty(3 * p)
    for i in range(p):
        cam, pt = cams[i % n], X[i % m]
        Xc = rodrigues(cam[:3], pt - cam[3:6])
        pr = Xc[:2] / Xc[2]
        rsq = pr @ pr
        pr = pr * (1 + cam[9] * rsq + cam[10] * rsq * rsq) * cam[6] + cam[7:9]
        out[2 * i:2 * i + 2] = w[i] * (pr - feat)
        out[2 * p + i] = 1 - w[i] ** 2
    return out


def test_ba(tool):
    n, m, p = 3, 4, 7
    cam = [0.1, -0.2, 0.3, 1.0, 2.0, -3.0, 5.0, 0.1, 0.2, 0.01, 0.001]
    inp = {"n": n, "m": m, "p": p, "cam": cam, "x": [3.0, 1.0, 2.0], "w": 0.8, "feat": [0.5, -0.5]}
    v = np.concatenate([np.tile(cam, n), np.tile(inp["x"], m), np.full(p, 0.8)])
    res = ba_ref(v, n, m, p, np.array(inp["feat"]))
    out = tool.evaluate("ba", "objective", inp)
    assert out["reproj_error"]["repeated"] == p and out["w_err"]["repeated"] == p
    close(out["reproj_error"]["elements"], res[:2])
    close(out["w_err"]["element"], res[2 * p])
    J = np.stack([fd(lambda u: ba_ref(u, n, m, p, np.array(inp["feat"]))[r], v) for r in range(3 * p)])
    jac = tool.evaluate("ba", "jacobian", inp)
    # the structural pattern, as GradBench's C++ tool lays it out (CSR, sorted columns):
    # a reprojection row has its camera's 11 columns, its point's 3 and its weight's
    nz = []
    for r in range(2 * p):
        i = r // 2
        cols = (list(range(11 * (i % n), 11 * (i % n) + 11))
                + list(range(11 * n + 3 * (i % m), 11 * n + 3 * (i % m) + 3)) + [11 * n + 3 * m + i])
        nz += [(r, c) for c in cols]
    nz += [(2 * p + i, 11 * n + 3 * m + i) for i in range(p)]
    assert np.count_nonzero(J) <= len(nz) and all(J[r, c] == 0 for r, c in
                                                   set(zip(*np.nonzero(J))) - set(nz))
    rowptr = np.concatenate([[0], np.cumsum(np.bincount([r for r, _ in nz], minlength=3 * p))])
    assert jac["rows"] == rowptr[:30].tolist() + [len(nz)]
    assert jac["cols"] == [c for _, c in nz[:30]] + [nz[-1][1]]
    close(jac["vals"], [J[r, c] for r, c in nz[:30]] + [J[nz[-1]]], rtol=1e-5, atol=1e-7)


@pytest.mark.skipif(not LONG, reason="the first compile of the hand model (numba primal and "
                    "zyg's forward mode) takes ~30 s on a cold cache; ZYG_LONG_TESTS=1 runs it")
def test_ht_jacobian_against_differences_of_the_objective(tool):
    # a small synthetic hand (22 bones in a chain, 6 vertices); the objective itself is
    # validated against GradBench's C++ reference by run_local.py, here the Jacobian is
    # checked against central differences of the tool's own objective (both variants)
    rng = np.random.default_rng(8)
    nb, nv = 22, 6
    rel = np.tile(np.eye(4), (nb, 1, 1))
    rel[:, :3, 3] = rng.normal(size=(nb, 3)) * 0.3
    model = {"bone_names": [f"b{i}" for i in range(nb)], "parents": list(range(-1, nb - 1)),
             "base_relatives": rel.tolist(), "inverse_base_absolutes": rel.tolist(),
             "base_positions": np.hstack([rng.normal(size=(nv, 3)), np.ones((nv, 1))]).tolist(),
             "weights": (rng.random((nv, nb)) / nb).tolist(),
             "triangles": [[0, 1, 2], [3, 4, 5]], "is_mirrored": True}
    theta = rng.normal(size=26) * 0.3
    for us in ([], [[0.2, 0.3], [0.5, 0.1]]):
        inp = {"theta": theta.tolist(), "us": us,
               "data": {"model": model, "correspondences": [1, 0] if us else [4, 2],
                        "points": rng.normal(size=(2, 3)).tolist()}}
        J = np.array(tool.evaluate("ht", "jacobian", inp))

        def obj(th, u):
            return np.array(tool.evaluate("ht", "objective", inp | {"theta": th.tolist(),
                                                                     "us": u.tolist() if us else []}))
        u0 = np.array(us if us else np.zeros((2, 2)))
        Jt = np.stack([fd(lambda t: obj(t, u0)[r], theta) for r in range(6)])
        if us:
            Ju = np.stack([fd(lambda u: obj(theta, u)[r], u0) for r in range(6)])
            own = np.stack([Ju[r].reshape(2, 2)[r // 3] for r in range(6)])
            Jt = np.hstack([own, Jt])
        close(J, Jt, rtol=1e-5, atol=1e-7)


@pytest.mark.skipif(not LONG, reason="nested gradient descent (a few hundred inner solves "
                    "in Python): ~5-10 s a variant; ZYG_LONG_TESTS=1 runs it")
def test_particle_and_saddle(tool):
    # the values GradBench's particle and saddle evals expect
    close(tool.evaluate("particle", "rr", {"w": 0.0}), 0.2071918746486116, rtol=1e-4)
    close(tool.evaluate("particle", "fr", {"w": 0.0}), 0.2071918746486116, rtol=1e-4)
    close(tool.evaluate("saddle", "rr", {"start": [1.0, 1.0]}), [8.246324826140356e-06] * 4,
          rtol=1e-4, atol=1e-9)
    close(tool.evaluate("saddle", "fr", {"start": [1.0, 1.0]}), [8.246324826140356e-06] * 4,
          rtol=1e-4, atol=1e-9)
    # forward mode inside the differentiated function (zyg.jvp inside: JvpOf)
    for v in ("rf", "ff"):
        close(tool.evaluate("particle", v, {"w": 0.0}), 0.2071918746486116, rtol=1e-4)
        close(tool.evaluate("saddle", v, {"start": [1.0, 1.0]}), [8.246324826140356e-06] * 4,
              rtol=1e-4, atol=1e-9)
