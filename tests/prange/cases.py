"""Parallel loops (numba.prange) as numba users write them, for tests/test_tasks_prange.py.

Each case runs as plain Python (prange is range there: the serial version) and through
zyg on both targets; ``python -m tests.prange.cases`` (run by the tests under several
numba threading layers and thread counts) checks the cpu gradients against central
differences of the serial version and prints one line per case."""
import sys

import numba
import numpy as np
from numba import prange


def independent(x, w):
    """Independent writes, a scalar sum and a read-only scalar."""
    n = x.shape[0]
    out = np.empty(n)
    s = 0.0
    for i in prange(n):
        v = np.sin(x[i]) * w
        out[i] = v * v
        s += v
    return s + np.sum(out * x)


def gather(x, idx, y):
    """A gather with repeated indices: the adjoint adds into x's shadow from many iterations."""
    n = idx.shape[0]
    out = np.empty(n)
    for i in prange(n):
        xi = x[idx[i]]
        out[i] = xi * y[i] + xi * xi
    return np.sum(out * out)


def stencil(u, c):
    """A heat stencil: prange inside a time loop, ping-pong buffers, neighbours read."""
    n = u.shape[0]
    a = u.copy()
    b = np.empty(n)
    for t in range(4):
        for i in prange(n):
            b[i] = a[i] + c * (a[(i + n - 1) % n] - 2.0 * a[i] + a[(i + 1) % n])
        a, b = b, a
    return np.sum(a * a * u)


def gmm_like(X, means, logw):
    """Shared parameters read by every iteration (GMM): a log-sum-exp per point."""
    n, d = X.shape
    k = means.shape[0]
    total = 0.0
    for i in prange(n):
        vals = np.empty(k)
        for j in range(k):
            q = 0.0
            for l in range(d):
                diff = X[i, l] - means[j, l]
                q += diff * diff
            vals[j] = logw[j] - 0.5 * q
        mx = np.max(vals)
        total += mx + np.log(np.sum(np.exp(vals - mx)))
    return total


def branches(x, y):
    """Conditional sums, a subtraction, an integer count, 'continue', a nested prange."""
    n = x.shape[0]
    pos = 0.0
    neg = 0.0
    count = 0
    rows = np.zeros((n, 3))
    for i in prange(n):
        if x[i] > 0.0:
            pos += x[i] * y[i]
            count += 1
        else:
            neg -= x[i] * x[i]
        if y[i] < -0.5:
            continue
        for j in prange(3):
            rows[i, j] = x[i] * (j + 1.0) + y[i]
    return pos * neg + np.sum(rows ** 2) + count


def shared_read(x):
    """A written array also read at an element no iteration writes: a serial backward."""
    n = x.shape[0]
    y = np.zeros(n + 1)
    y[n] = x[0] * 2.0
    for i in prange(n):
        y[i] = x[i] * y[n] + y[i]
    return np.sum(y * y)


def extremes(x, w, c):
    """min and max reductions (the winner's iteration gets the cotangent; the value before
    the loop when nothing beats it) beside a sum."""
    n = x.shape[0]
    hi = c
    lo = 1e300
    s = 0.0
    for i in prange(n):
        v = np.sin(x[i] * w)
        hi = max(hi, v * x[i])
        lo = min(v, lo)
        s += v
    return hi * 2.0 + lo + s


def matrix_steps(x, w):
    """A 2-D array updated in place by a prange in a time loop (the compiled pair saves and
    restores it), beside an integer array it also writes and a sum."""
    n = x.shape[0]
    M = np.ones((n, 3))
    cnt = np.zeros(n, np.int64)
    s = 0.0
    for t in range(3):
        for i in prange(n):
            for j in range(3):
                M[i, j] = M[i, j] * w + x[i] * (j + t)
            if M[i, 0] > 0.0:
                cnt[i] = cnt[i] + 1
            s += M[i, 1] * x[i]
    return np.sum(M * M) + s + np.sum(cnt) * 0.1


def into_argument(x, out):
    """Writes into an argument array (an output argument), then reads it."""
    n = x.shape[0]
    for i in prange(n):
        out[i] = np.sin(x[i]) * x[i]
    return np.sum(out * x)


def through_row(x, M):
    """The written array is a row of another (a view made before the loop)."""
    n = x.shape[0]
    A = M.copy()
    for k in range(3):
        row = A[k]
        for i in prange(n):
            row[i] = row[i] * x[i] + k
    return np.sum(A * A)


def inputs(seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=40)
    return {
        "independent": (independent, (x, 0.7), (0, 1)),
        "gather": (gather, (rng.normal(size=5), rng.integers(0, 5, 60), rng.normal(size=60)), (0, 2)),
        "stencil": (stencil, (rng.normal(size=30), 0.2), (0, 1)),
        "gmm_like": (gmm_like, (rng.normal(size=(25, 3)), rng.normal(size=(4, 3)), rng.normal(size=4)),
                     (0, 1, 2)),
        "branches": (branches, (x, rng.normal(size=40)), (0, 1)),
        "shared_read": (shared_read, (x,), (0,)),
        "extremes": (extremes, (x, 0.8, 0.3), (0, 1, 2)),
        "extremes_initial": (extremes, (x, 0.8, 5.0), (0, 1, 2)),
        "matrix_steps": (matrix_steps, (rng.normal(size=12), 0.9), (0, 1)),
        "into_argument": (into_argument, (x, np.zeros(40)), (0,)),
        "through_row": (through_row, (rng.normal(size=6), rng.normal(size=(4, 6))), (0, 1)),
    }


def central(f, args, i, h=1e-6):
    """Central differences of f in argument i (a float or a float array)."""
    a = args[i]
    if np.ndim(a) == 0:
        def at(v):
            return f(*args[:i], v, *args[i + 1:])
        return (at(a + h) - at(a - h)) / (2 * h)
    g = np.zeros_like(a)
    for k in np.ndindex(a.shape):
        ap, am = a.copy(), a.copy()
        ap[k] += h
        am[k] -= h
        g[k] = (f(*args[:i], ap, *args[i + 1:]) - f(*args[:i], am, *args[i + 1:])) / (2 * h)
    return g


def stress(n=1_000_000):
    """Many iterations adding into two shared elements: a race would lose additions
    (atomic additions for gather's x, a row per thread for shared_params' w)."""
    rng = np.random.default_rng(1)
    x = rng.normal(size=2)
    idx = rng.integers(0, 2, n)
    y = rng.normal(size=n)
    return x, idx, y


def stress_exact(x, idx, y):
    """d/dx of gather's value, summed exactly in float64 per bin (math.fsum)."""
    import math
    xi = x[idx]
    out = xi * y + xi * xi
    per = 2 * out * (y + 2 * xi)
    return np.array([math.fsum(per[idx == b]) for b in range(x.shape[0])])


def shared_params(w, x):
    """Parameters every iteration reads at the same elements: a shadow row per thread."""
    s = 0.0
    for i in prange(x.shape[0]):
        s += w[0] * x[i] + w[1] * x[i] * x[i]
    return s


def shared_params_exact(x):
    import math
    return np.array([math.fsum(x), math.fsum(x * x)])


def main(names) -> int:
    import zyg
    bad = 0
    cases = inputs()
    for name in names:
        if name == "stress":
            x, idx, y = stress()
            g = zyg.grad(gather, argnums=0, target="cpu")(x, idx, y)
            want = stress_exact(x, idx, y)
            err = float(np.max(np.abs(g - want) / np.abs(want)))
            ok = err < 1e-9
        elif name == "stress_rows":
            x = stress()[2]
            g = zyg.grad(shared_params, argnums=0, target="cpu")(np.array([0.3, -0.2]), x)
            want = shared_params_exact(x)
            err = float(np.max(np.abs(g - want) / np.abs(want)))
            ok = err < 1e-9
        else:
            f, args, argnums = cases[name]
            g = zyg.grad(f, argnums=argnums, target="cpu")(*args)
            err = 0.0
            for k, i in enumerate(argnums):
                want = central(f, args, i)
                err = max(err, float(np.max(np.abs(np.asarray(g[k]) - want)
                                            / (1e-6 + np.abs(want)))))
            ok = err < 1e-5
        bad += not ok
        print(f"{name} {'ok' if ok else 'WRONG'} {err:.2e} layer={numba.threading_layer()} "
              f"threads={numba.get_num_threads()}", flush=True)
    return bad


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
