"""Differentiated MPI programs, run by tests/test_tasks_mpi.py under ``mpiexec -n N``.

Each rank runs every case on the python and cpu targets and checks its gradient against the
serial program's (zyg's python target on the whole data, itself checked against central
differences): every rank gets the derivative of the sum over ranks of the ranks' outputs
with respect to its own inputs.  A rank prints ``OK <case> <target>`` per passing case and
exits non-zero on the first failure (mpiexec then fails).

    mpiexec -n 2 python tests/mpi/cases.py [case ...]
    ZYG_MPI_TARGETS=cpu mpiexec -n 4 python tests/mpi/cases.py heat
"""
import os
import sys

import numpy as np
import numba_mpi as mpi
from mpi4py import MPI

import zyg

RANK, SIZE = mpi.rank(), mpi.size()
# ZYG_MPI_TARGETS=python limits the targets (the 4-rank run on a 2-core machine)
TARGETS = tuple(os.environ.get("ZYG_MPI_TARGETS", "python,cpu").split(","))


def fd_grad(f, x, eps=1e-6):
    g = np.zeros_like(x)
    for k in range(x.size):
        e = np.zeros_like(x)
        e.flat[k] = eps
        g.flat[k] = (f(x + e) - f(x - e)) / (2 * eps)
    return g


def close(got, want, what, rtol=1e-10, atol=1e-12):
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape or not np.allclose(got, want, rtol=rtol, atol=atol):
        print(f"rank {RANK}: {what}: got {got!r}, want {want!r}", flush=True)
        mpi_abort()


def mpi_abort():
    sys.stdout.flush()
    from mpi4py import MPI
    MPI.COMM_WORLD.Abort(1)


def sum_over_ranks(a):
    number = np.ndim(a) == 0
    a = np.atleast_1d(np.asarray(a, dtype=np.float64))
    out = np.zeros_like(a)
    mpi.allreduce(a, out, mpi.Operator.SUM)
    return out[0] if number else out


# -- 1. data-parallel logistic regression: the loss is the allreduce-sum of the chunks' losses --

def nll_allreduce(w, X, y):
    r = 0.0
    for i in range(X.shape[0]):
        z = 0.0
        for j in range(X.shape[1]):
            z += X[i, j] * w[j]
        r += max(z, 0.0) + np.log1p(np.exp(-abs(z))) - y[i] * z
    local = np.zeros(1)
    local[0] = r
    total = np.empty(1)
    mpi.allreduce(local, total, mpi.Operator.SUM)
    return total[0]


def nll_allreduce_scalar(w, X, y):
    r = 0.0
    for i in range(X.shape[0]):
        z = np.dot(X[i], w)
        r += np.log1p(np.exp(z)) - y[i] * z
    total = np.zeros(1)
    mpi.allreduce(r, total)          # a number, the default operator (SUM)
    return total[0] / mpi.size()


def nll_serial(w, X, y):
    z = X @ w
    return np.sum(np.maximum(z, 0.0) + np.log1p(np.exp(-np.abs(z))) - y * z)


def case_allreduce():
    rng = np.random.default_rng(1)
    N, D = 48, 4
    X = rng.standard_normal((N, D))
    y = (rng.random(N) < 0.5).astype(np.float64)
    w = 0.5 * rng.standard_normal(D)
    Xl, yl = X[RANK::SIZE].copy(), y[RANK::SIZE].copy()
    g_serial = zyg.grad(nll_serial, target="python")(w, X, y)
    close(g_serial, fd_grad(lambda v: nll_serial(v, X, y), w), "serial gradient vs differences", 1e-6, 1e-7)
    for t in TARGETS:
        v, g = zyg.value_and_grad(nll_allreduce, target=t)(w, Xl, yl)
        close(v, nll_serial(w, X, y), f"allreduce value ({t})")
        # every rank's output is the total: the sum over ranks of the outputs is SIZE totals,
        # and each rank gets SIZE times its own chunk's gradient
        close(sum_over_ranks(g), SIZE * g_serial, f"allreduce gradient ({t})")
        v, g = zyg.value_and_grad(nll_allreduce_scalar, target=t)(w, Xl, yl)
        close(sum_over_ranks(g), g_serial, f"allreduce of a number ({t})")
        yield t


# -- 2. a 1-D heat equation on a ring, halos exchanged with sendrecv -----------------------------

STEPS, ALPHA = 6, 0.2


def heat_mpi(u0, steps):
    m = u0.shape[0]
    left, right = (mpi.rank() - 1) % mpi.size(), (mpi.rank() + 1) % mpi.size()
    u = np.zeros(m + 2)
    u[1:m + 1] = u0
    gl = np.zeros(1)
    gr = np.zeros(1)
    for t in range(steps):
        # my last cell to the right neighbour, the left neighbour's last into my left halo
        mpi.sendrecv(u[m:m + 1], right, gl, left, 1, 1)
        mpi.sendrecv(u[1:2], left, gr, right, 2, 2)
        u[0] = gl[0]
        u[m + 1] = gr[0]
        new = u[1:m + 1] + ALPHA * (u[0:m] - 2.0 * u[1:m + 1] + u[2:m + 2])
        u[1:m + 1] = np.sin(new)
    return np.sum(u[1:m + 1] ** 2)


def heat_serial(u0, steps):
    u = u0.copy()
    for t in range(steps):
        new = u + ALPHA * (np.roll(u, 1) - 2.0 * u + np.roll(u, -1))
        u = np.sin(new)
    return np.sum(u ** 2)


def case_heat():
    m = 5
    rng = np.random.default_rng(2)
    full = rng.standard_normal(m * SIZE)
    mine = full[RANK * m:(RANK + 1) * m].copy()
    g_serial = fd_grad(lambda v: heat_serial(v, STEPS), full)
    for t in TARGETS:
        v, g = zyg.value_and_grad(heat_mpi, target=t)(mine, STEPS)
        close(sum_over_ranks(v), heat_serial(full, STEPS), f"heat value ({t})")
        place = np.zeros(m * SIZE)
        place[RANK * m:(RANK + 1) * m] = g
        close(sum_over_ranks(place), g_serial, f"heat gradient ({t})", 1e-6, 1e-8)
        yield t


# -- 3. bcast of the root's parameters, reduce of the ranks' losses to the root ------------------

def bcast_reduce(p, data):
    mpi.bcast(p, 0)
    local = np.zeros(1)
    for i in range(data.shape[0]):
        local[0] += np.sin(p[i % p.shape[0]] * data[i])
    total = np.zeros(1)
    mpi.reduce(local, total, mpi.Operator.SUM, 0)
    return total[0] * 2.0


def bcast_reduce_serial(p, datas):
    s = 0.0
    for data in datas:
        for i in range(data.shape[0]):
            s += np.sin(p[i % p.shape[0]] * data[i])
    return 2.0 * s


def case_bcast_reduce():
    rng = np.random.default_rng(3)
    p_root = rng.standard_normal(3)
    datas = [rng.standard_normal(7) for _ in range(SIZE)]
    want_p = fd_grad(lambda v: bcast_reduce_serial(v, datas), p_root)
    want_d = fd_grad(lambda v: bcast_reduce_serial(p_root, datas[:RANK] + [v] + datas[RANK + 1:]),
                     datas[RANK])
    for t in TARGETS:
        # every rank passes its own p; only the root's counts (bcast overwrites the others')
        p = p_root.copy() if RANK == 0 else np.full(3, 7.0)
        v, (gp, gd) = zyg.value_and_grad(bcast_reduce, argnums=(0, 1), target=t)(p, datas[RANK].copy())
        close(v, bcast_reduce_serial(p_root, datas) if RANK == 0 else 0.0, f"reduce value ({t})")
        close(gp, want_p if RANK == 0 else np.zeros(3), f"bcast gradient ({t})", 1e-6, 1e-8)
        close(gd, want_d, f"reduce gradient ({t})", 1e-6, 1e-8)
        yield t


# -- 4. point-to-point around a ring: send and recv ordered by parity ---------------------------

def ring(x):
    nxt, prv = (mpi.rank() + 1) % mpi.size(), (mpi.rank() - 1) % mpi.size()
    got = np.zeros(x.shape[0])
    mine = np.exp(x) * (mpi.rank() + 1.0)
    if mpi.rank() % 2 == 0:
        mpi.send(mine, nxt, 5)
        mpi.recv(got, prv, 5)
    else:
        mpi.recv(got, prv, 5)
        mpi.send(mine, nxt, 5)
    return np.sum(np.sin(got) * x)


def ring_serial(xs):
    s = 0.0
    n = len(xs)
    for r in range(n):
        prv = (r - 1) % n
        s += np.sum(np.sin(np.exp(xs[prv]) * (prv + 1.0)) * xs[r])
    return s


def case_ring():
    rng = np.random.default_rng(4)
    xs = [rng.standard_normal(3) for _ in range(SIZE)]
    want = fd_grad(lambda v: ring_serial(xs[:RANK] + [v] + xs[RANK + 1:]), xs[RANK])
    for t in TARGETS:
        v, g = zyg.value_and_grad(ring, target=t)(xs[RANK].copy())
        close(sum_over_ranks(v), ring_serial(xs), f"ring value ({t})")
        close(g, want, f"ring gradient ({t})", 1e-6, 1e-8)
        yield t


# -- 5. messages received out of order by their tags, into views of a larger array -------------

def tagged(a, b):
    r = mpi.rank()
    u = np.zeros(5)
    if r % 2 == 0:
        if r + 1 < mpi.size():
            mpi.send(np.sin(a), r + 1, 1)
            mpi.send(b * b, r + 1, 2)
        return np.sum(a * b)
    mpi.recv(u[3:5], r - 1, 2)      # b * b, received first
    mpi.recv(u[0:2], r - 1, 1)      # sin(a)
    return np.sum(u[0:2] * 3.0 + u[3:5] ** 3) + np.sum(a * b)


def case_tags():
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal(2), rng.standard_normal(2)
    peer = RANK % 2 == 0 and RANK + 1 < SIZE

    def total(a_, b_):      # my own output plus my receiver's, as functions of my a and b
        s = np.sum(a_ * b_)
        if peer:
            s += np.sum(np.sin(a_) * 3.0 + (b_ * b_) ** 3)
        return s
    want_a = fd_grad(lambda v: total(v, b), a)
    want_b = fd_grad(lambda v: total(a, v), b)
    for t in TARGETS:
        ga, gb = zyg.grad(tagged, argnums=(0, 1), target=t)(a.copy(), b.copy())
        close(ga, want_a, f"tagged gradient a ({t})", 1e-6, 1e-8)
        close(gb, want_b, f"tagged gradient b ({t})", 1e-6, 1e-8)
        yield t


# -- 6. messages of values that are not active at one end or the other --------------------------

def inactive(x):
    r = mpi.rank()
    if r % 2 == 0:
        if r + 1 < mpi.size():
            mpi.send(np.full(2, 2.0), r + 1, 0)     # a constant
            mpi.send(x * 3.0, r + 1, 0)             # active here, ignored by the receiver
        return np.sum(x ** 2)
    buf = np.zeros(2)
    junk = np.zeros(2)
    mpi.recv(buf, r - 1, 0)
    mpi.recv(junk, r - 1, 0)
    return np.sum(x * buf)


def case_inactive():
    x = np.array([0.5, -1.5])
    sender = RANK % 2 == 0
    want = 2.0 * x if sender else np.full(2, 2.0)
    for t in TARGETS:
        if not sender or RANK + 1 < SIZE:
            close(zyg.grad(inactive, target=t)(x.copy()), want, f"inactive messages ({t})")
        else:
            close(zyg.grad(inactive, target=t)(x.copy()), 2.0 * x, f"no peer ({t})")
        yield t


# -- 7. forward mode and forward over reverse: jvp and hvp through every call ------------------

def case_forward():
    """``jvp``: the sum over ranks of the output tangents is the sum over ranks of
    gradient . tangent (both are the directional derivative of the sum of the outputs).
    ``hvp``: the derivative of every rank's gradient along every rank's direction at once,
    against central differences of the gradients."""
    rng = np.random.default_rng(6 + RANK)
    m = 4
    progs = [heat_mpi_3, ring, tagged_same, bcast_reduce_one]
    for t in TARGETS:
        for k, f in enumerate(progs):
            x = rng.standard_normal(m)
            v = rng.standard_normal(m)
            g = zyg.grad(f, target=t)(x.copy())
            y, ty = zyg.jvp(f, (x.copy(),), (v.copy(),), target=t)
            close(sum_over_ranks(ty), sum_over_ranks(np.dot(g, v)), f"jvp of {f.__name__} ({t})")
            close(y, f(x.copy()), f"jvp value of {f.__name__} ({t})")
            if t == "cpu" and k:
                continue        # second-order code compiles slowly: the halo exchange's on cpu
            hv = zyg.hvp(f, x.copy(), v.copy(), target=t)
            eps = 1e-5
            fd = (zyg.grad(f, target=t)(x + eps * v) - zyg.grad(f, target=t)(x - eps * v)) / (2 * eps)
            close(hv, fd, f"hvp of {f.__name__} ({t})", 1e-5, 1e-7)
        yield t


def heat_mpi_3(x):
    return heat_mpi(x, 3)


def tagged_same(x):
    return tagged(x[:2].copy(), x[2:].copy())


def bcast_reduce_one(x):
    return bcast_reduce(x[:3].copy(), x)


# -- 8. non-blocking calls: a halo exchange and a ring with tags, reversed at their waits ---------

def heat_nb(u0, steps):
    """``heat_mpi`` with the halos exchanged by irecv / isend / waitall, without tags: on two
    ranks (left and right the same rank) the halos are told apart by the order of the
    messages alone, and so are the reverse messages."""
    m = u0.shape[0]
    left, right = (mpi.rank() - 1) % mpi.size(), (mpi.rank() + 1) % mpi.size()
    u = np.zeros(m + 2)
    u[1:m + 1] = u0
    for t in range(steps):
        s, rl = mpi.irecv(u[0:1], left)
        s, rr = mpi.irecv(u[m + 1:m + 2], right)
        s, sr = mpi.isend(u[m:m + 1], right)
        s, sl = mpi.isend(u[1:2], left)
        mpi.waitall((sl, rr, rl, sr))       # in any order: waited in the order they started
        new = u[1:m + 1] + ALPHA * (u[0:m] - 2.0 * u[1:m + 1] + u[2:m + 2])
        u[1:m + 1] = np.sin(new)
    return np.sum(u[1:m + 1] ** 2)


def ring_nb(x):
    """Two messages to the next rank, received by tag in the other order; one of them sent
    by a blocking send, the other by isend; waits one by one and by waitall."""
    r = mpi.rank()
    nxt, prv = (r + 1) % mpi.size(), (r - 1) % mpi.size()
    u = np.zeros(4)
    s, ra = mpi.irecv(u[2:4], prv, 4)       # the message of tag 4, sent second
    s, rb = mpi.irecv(u[0:2], prv, 3)
    mpi.send(x[2:4] ** 2, nxt, 4)
    s, sa = mpi.isend(np.sin(x[0:2]) * (r + 1.0), nxt, 3)
    mpi.wait(ra)
    mpi.waitall((rb, sa))
    return np.sum(u[0:2] * 3.0 + u[2:4] ** 3 * x[0:2]) + np.sum(x * x[::-1])


def ring_nb_serial(xs):
    s = 0.0
    n = len(xs)
    for r in range(n):
        p = (r - 1) % n
        u0, u2 = np.sin(xs[p][0:2]) * (p + 1.0), xs[p][2:4] ** 2
        s += np.sum(u0 * 3.0 + u2 ** 3 * xs[r][0:2]) + np.sum(xs[r] * xs[r][::-1])
    return s


def case_nonblocking():
    m = 5
    rng = np.random.default_rng(2)
    full = rng.standard_normal(m * SIZE)
    mine = full[RANK * m:(RANK + 1) * m].copy()
    g_heat = fd_grad(lambda v: heat_serial(v, STEPS), full)
    xs = [rng.standard_normal(4) for _ in range(SIZE)]
    g_ring = fd_grad(lambda v: ring_nb_serial(xs[:RANK] + [v] + xs[RANK + 1:]), xs[RANK])
    frng = np.random.default_rng(60 + RANK)
    for t in TARGETS:
        v, g = zyg.value_and_grad(heat_nb, target=t)(mine.copy(), STEPS)
        close(sum_over_ranks(v), heat_serial(full, STEPS), f"non-blocking heat value ({t})")
        place = np.zeros(m * SIZE)
        place[RANK * m:(RANK + 1) * m] = g
        close(sum_over_ranks(place), g_heat, f"non-blocking heat gradient ({t})", 1e-6, 1e-8)
        gs = {"heat": g}
        v, g = zyg.value_and_grad(ring_nb, target=t)(xs[RANK].copy())
        close(sum_over_ranks(v), ring_nb_serial(xs), f"non-blocking ring value ({t})")
        close(g, g_ring, f"non-blocking ring gradient ({t})", 1e-6, 1e-8)
        gs["ring"] = g
        # forward mode: the tangents travel with the values, under the same requests; the sum
        # over ranks of the output tangents is the sum over ranks of gradient . tangent
        for name, f, x, rest in (("heat", heat_nb, mine, (STEPS,)), ("ring", ring_nb, xs[RANK], ())):
            d = frng.standard_normal(x.size)
            if t == "cpu" and name == "heat":
                continue        # compile time: the ring's jvp covers both directions on cpu
            y, ty = zyg.jvp(f, (x.copy(),) + rest, (d.copy(),) + (None,) * len(rest), target=t)
            close(y, f(x.copy(), *rest), f"jvp value of {name} ({t})")
            close(sum_over_ranks(ty), sum_over_ranks(np.dot(gs[name], d)), f"jvp of non-blocking {name} ({t})")
            if t == "python":       # forward over the reverse code (second order compiles slowly on cpu)
                hv = zyg.hvp(f, x.copy(), d.copy(), *rest, target=t)
                eps = 1e-5
                vg = zyg.grad(f, target=t)
                fd = (vg(x + eps * d, *rest) - vg(x - eps * d, *rest)) / (2 * eps)
                close(hv, fd, f"hvp of non-blocking {name} ({t})", 1e-5, 1e-7)
        yield t


# -- 9. the heat ring through mpi4py's buffer calls of COMM_WORLD (Sendrecv, Allreduce) ------

def heat_mpi4py(u0, steps):
    comm = MPI.COMM_WORLD
    m = u0.shape[0]
    left, right = (comm.Get_rank() - 1) % comm.Get_size(), (comm.Get_rank() + 1) % comm.Get_size()
    u = np.zeros(m + 2)
    u[1:m + 1] = u0
    gl = np.zeros(1)
    gr = np.zeros(1)
    for t in range(steps):
        comm.Sendrecv(u[m:m + 1], right, 1, gl, left, 1)
        comm.Sendrecv(u[1:2], left, 2, gr, right, 2)
        u[0] = gl[0]
        u[m + 1] = gr[0]
        new = u[1:m + 1] + ALPHA * (u[0:m] - 2.0 * u[1:m + 1] + u[2:m + 2])
        u[1:m + 1] = np.sin(new)
    local = np.array([np.sum(u[1:m + 1] ** 2)])
    total = np.zeros(1)
    comm.Allreduce(local, total, op=MPI.SUM)
    return total[0]


def case_mpi4py():
    m = 4
    rng = np.random.default_rng(9)
    full = rng.standard_normal(m * SIZE)
    mine = full[RANK * m:(RANK + 1) * m].copy()
    g_serial = fd_grad(lambda v: heat_serial(v, 3), full)
    # the program itself, run by mpi4py
    close(heat_mpi4py(mine.copy(), 3), heat_serial(full, 3), "mpi4py program's value")
    for t in TARGETS:
        v, g = zyg.value_and_grad(heat_mpi4py, target=t)(mine, 3)
        close(v, heat_serial(full, 3), f"mpi4py value ({t})")
        # every rank's output is the total: each rank gets SIZE times its own part
        place = np.zeros(m * SIZE)
        place[RANK * m:(RANK + 1) * m] = g
        close(sum_over_ranks(place), SIZE * g_serial, f"mpi4py gradient ({t})", 1e-6, 1e-8)
        yield t


CASES = {"allreduce": case_allreduce, "heat": case_heat, "bcast_reduce": case_bcast_reduce,
         "ring": case_ring, "tags": case_tags, "inactive": case_inactive,
         "forward": case_forward, "nonblocking": case_nonblocking, "mpi4py": case_mpi4py}

if __name__ == "__main__":
    zyg.set_compile_notice(0)
    for name in sys.argv[1:] or list(CASES):
        for t in CASES[name]():
            print(f"OK {name} {t} rank {RANK}", flush=True)
    mpi.barrier()
