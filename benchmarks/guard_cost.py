"""Cost of zyg/safety.py's guard on functions that write into argument arrays: the same
gradient built with and without the guard, timed side by side in one process
(``python -m benchmarks.guard_cost``).  No workload of ``benchmarks.run`` writes into
an argument, so none of them is guarded."""
import time, numpy as np, zyg
from zyg import safety

def heat_inplace(u, alpha, steps):
    n = u.shape[0]
    tmp = np.zeros(n)
    for t in range(steps):
        for i in range(1, n - 1):
            tmp[i] = u[i] + alpha * (u[i - 1] - 2.0 * u[i] + u[i + 1])
        for i in range(1, n - 1):
            u[i] = tmp[i]
    return np.sum(u * u)

def heat_inplace2(u, alpha, steps):   # same body, built without the guard
    n = u.shape[0]
    tmp = np.zeros(n)
    for t in range(steps):
        for i in range(1, n - 1):
            tmp[i] = u[i] + alpha * (u[i - 1] - 2.0 * u[i] + u[i + 1])
        for i in range(1, n - 1):
            u[i] = tmp[i]
    return np.sum(u * u)

def scale_one(u, k):     # writes one element: the worst case for a snapshot
    u[k] = u[k] * 2.0
    return u[k] * u[k]

def scale_one2(u, k):
    u[k] = u[k] * 2.0
    return u[k] * u[k]

g1 = zyg.value_and_grad(heat_inplace, argnums=(0, 1))
orig = safety.guard_grad
safety.guard_grad = lambda fn, mode, p, ir: fn
g2 = zyg.value_and_grad(heat_inplace2, argnums=(0, 1))
s2 = zyg.value_and_grad(scale_one2)
g2(np.linspace(0.0, 1.0, 5), 0.2, 2)       # built (lazily, on the first call) without the guard
s2(np.linspace(0.0, 1.0, 5), 3)
safety.guard_grad = orig
s1 = zyg.value_and_grad(scale_one)

def med(f, *a, reps=7, inner=1):
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        for _ in range(inner):
            f(*a)
        ts.append((time.perf_counter() - t) / inner)
    return sorted(ts)[len(ts) // 2]

for n, steps, inner in ((50, 1000, 20), (1000, 10, 200), (100000, 1, 10)):
    u = np.linspace(0.0, 1.0, n)
    assert np.allclose(g1(u, 0.2, steps)[1][0], g2(u, 0.2, steps)[1][0])
    a = [med(g1, u, 0.2, steps, inner=inner) for _ in range(7)]
    b = [med(g2, u, 0.2, steps, inner=inner) for _ in range(7)]
    print(f"heat in place n={n} steps={steps}: guarded {min(a)*1e6:.1f} us, unguarded {min(b)*1e6:.1f} us, ratio {min(a)/min(b):.3f}")
for n in (10, 1000, 100000):
    u = np.linspace(0.0, 1.0, n)
    a = [med(s1, u, 3, inner=2000 if n < 1e5 else 200) for _ in range(7)]
    b = [med(s2, u, 3, inner=2000 if n < 1e5 else 200) for _ in range(7)]
    print(f"one write into n={n}: guarded {min(a)*1e6:.2f} us, unguarded {min(b)*1e6:.2f} us, ratio {min(a)/min(b):.3f}")
