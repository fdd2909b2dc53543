"""Property tests of the cuda target (issue 25) under numba's simulator: random kernels
composed of what numba.cuda users write, whose adjoints (``zyg.vjp(kernel)``) are checked by
three oracles, and random functions of numbers whose device gradients are checked against
the cpu target's.

A kernel here takes ``(x, w, acc, y, n, m)``: points ``x`` (read at the thread's row and,
in some kernels, its neighbours', or updated in place), a parameter vector ``w`` every
thread reads at the same places (a shared parameter), an atomic accumulator ``acc`` and an
output ``y``.  Its body is two to five statements drawn from: elementwise arithmetic,
neighbour reads, a loop over ``w``, a data-dependent ``while`` loop, a branch, an in-place
update of ``x[i]`` read again later, an atomic addition, and a local scratch array; under
an ``if i < n:`` block or after an early ``return``; on partial blocks; some guarded ones read
their neighbour's point through a shared-memory tile after a barrier.

The oracles, for each kernel:

* **finite differences**: every float array's shadow along two random directions against
  central differences of the kernel's launch (a direction where differences at two step
  sizes disagree crosses a branch or a loop exit: counted as unreliable, not checked);
* **the ways of summing shared parameters' shadows agree**: each thread's copy summed per
  block (the default) against atomics into shared memory (``PRIVATE_ITEMS = 0``);
* **the ways of keeping the tape agree**: a tape of two items, so that the launch runs
  short and is relaunched with the tape in rows of buffers, against the default tape;
* the arrays the adjoint leaves equal those of a plain launch.

Launch tapes (``zyg.cuda.Tape``) over 3 to 6 launches of two such kernels on three buffers,
each launch reading one and writing another (ping-pong, buffers overwritten after earlier
launches read them, in-place updates, atomics into a shared accumulator): the gradients
of every buffer's contents before the first launch against finite differences of the
whole sequence.  (Programs whose results blow up past 1e6 count as unreliable.)

Device gradients (``zyg.vmap(zyg.value_and_grad(f, (0, 1)), target="cuda")``) of random
functions of two numbers and a trip count (arithmetic, counted, runtime-bound and ``while``
loops, ``break``, branches, a helper, ``sqrt``, powers): in reverse mode, forward mode and
reverse mode on a 2-item tape (relaunched with the tape in rows), each against the cpu
target's batch to 1e-12, and the cpu gradient against finite differences.

Every adjoint and batch kernel these programs build is also compiled to PTX, in a child
without the simulator (issue 25: every generated kernel of the suite compiles to PTX).  With
``ZYG_CUDA_DEVICE=1`` the families run on a GPU instead of the simulator.

Simulated threads are slow: the suite checks ``ZYG_CUDA_PROPERTY_N`` programs of each family
(by default 10 kernels, 8 tapes, 10 functions) from fixed seeds; ``ZYG_CUDA_PROPERTY_N=200 ZYG_CUDA_PROPERTY_SEED=7`` runs a longer,
different set outside CI.  The checks run in a child process (``NUMBA_ENABLE_CUDASIM=1``
must be set before numba is imported).
"""
import importlib.util
import json
import os
import random
import subprocess
import sys
import tempfile
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

#: the statements a kernel body is drawn from (``{c}``, ``{c2}``: random constants).  A
#: neighbour read and an in-place update are never combined: thread i + 1 would read what
#: thread i writes (a race)
PATTERNS = {
    "elementwise": ["s = s * {c} + math.sin(x[i] * {c2})"],
    "neighbour": ["if i + 1 < n:", "    s += x[i + 1] * {c}",
                  "if i > 0:", "    s -= x[i - 1] * x[i] * {c2}"],
    "shared_loop": ["for k in range(m):", "    s += w[k] * math.cos(s * {c} + x[i] * w[k])"],
    "while": ["t = abs(s) + 1.0", "while t > 0.3:", "    t = t * 0.5",
              "    s = s + w[0] * t * x[i]"],
    "branch": ["if x[i] * {c2} > s:", "    s = s * s * 0.5 + w[1]",
               "else:", "    s = math.tanh(s) - w[1] * x[i]"],
    "inplace": ["x[i] = math.tanh(x[i] * {c2}) + s * 0.25", "s = s + x[i] * x[i] * {c}"],
    "atomic": ["cuda.atomic.add(acc, 0, s * x[i] * {c})"],
    "local": ["tmp = cuda.local.array(2, numba.float64)", "tmp[0] = s * {c}",
              "tmp[1] = x[i] + w[0]", "s = tmp[0] * tmp[1] + s"],
}


def _stmt(table, kind, r: random.Random, ind: str):
    """The lines of statement ``kind`` of ``table`` with fresh constants, indented."""
    c = round(r.uniform(0.2, 0.9), 3)
    c2 = round(r.uniform(0.3, 1.5), 3)
    return [ind + t.format(c=c, c2=c2, c10=round(c / 10, 4)) for t in table[kind]]


def kernel_source(seed: int):
    """(source, description) of the kernel ``k`` of ``seed``."""
    r = random.Random(seed)
    kinds = [r.choice(list(PATTERNS)) for _ in range(r.randint(2, 5))]
    if "inplace" in kinds and "neighbour" in kinds:
        kinds = [k for k in kinds if k != "neighbour"] or ["elementwise"]
    early = r.random() < 0.5
    # (drawn apart, so that the kernels of earlier seeds stay as they were)
    tiled = not early and random.Random(7 * seed + 1).random() < 0.4
    lines = ["import math", "import numba", "from numba import cuda", "",
             "def k(x, w, acc, y, n, m):",
             "    i = cuda.grid(1)"]
    if tiled:
        # the neighbour's point through shared memory, after a barrier every thread of
        # the block reaches (blocks have at most 16 threads)
        lines += ["    sh = cuda.shared.array(16, numba.float64)",
                  "    t = cuda.threadIdx.x",
                  "    if i < n:",
                  "        sh[t] = x[i] * x[i]",
                  "    else:",
                  "        sh[t] = 0.0",
                  "    cuda.syncthreads()",
                  "    nb = sh[(t + 1) % cuda.blockDim.x]"]
    if early:
        lines += ["    if i >= n:", "        return"]
        ind = "    "
    else:
        lines += ["    if i < n:"]
        ind = "        "
        kinds = [k for k in kinds if k != "local"] or ["elementwise"]
    lines.append(f"{ind}s = x[i] * {round(r.uniform(0.5, 1.5), 3)}" + (" + nb" if tiled else ""))
    for kind in kinds:
        lines += _stmt(PATTERNS, kind, r, ind)
    lines.append(f"{ind}y[i] = s")
    return "\n".join(lines) + "\n", ("early return; " if early else "if i < n; ") + \
        ("a shared tile; " if tiled else "") + ", ".join(kinds)


def _load(src: str, seed: int, where: str, stem: str = "zyg_cuda_prop", name: str = "k"):
    """Function ``name`` of module ``src``, written to a file (zyg reads its source)."""
    path = os.path.join(where, f"{stem}_{seed}.py")
    with open(path, "w") as fh:
        fh.write(src)
    spec = importlib.util.spec_from_file_location(f"{stem}_{seed}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return getattr(mod, name)


def _rel(a, b):
    import numpy as np
    a, b = np.asarray(a, float), np.asarray(b, float)
    return float(np.max(np.abs(a - b) / (1.0 + np.abs(b)))) if a.size else 0.0


def _huge(arrays) -> bool:
    """Results so large that differences at steps of 1e-6 mean nothing (a chain of
    in-place updates can blow up): the program's directions count as unreliable."""
    import numpy as np
    return any(not np.all(np.isfinite(a)) or np.max(np.abs(a), initial=0.0) > 1e6 for a in arrays)


def check_kernel(seed: int, where: str):
    """The three oracles on the kernel of ``seed``; returns (checked, unreliable) counts of
    finite-difference directions, raises AssertionError on a mismatch."""
    import numpy as np
    import zyg
    import zyg.cuda as zc
    from numba import cuda
    from zyg import cuda_kernel as ck
    src, what = kernel_source(seed)
    plain = _load(src, seed, where)
    kern = cuda.jit(plain)
    r = np.random.default_rng(seed)
    n, m = int(r.integers(9, 30)), int(r.integers(2, 6))
    threads = int(r.choice([8, 12, 16]))
    cfg = ((n + threads - 1) // threads, threads)
    args = [r.normal(size=n) * 0.8, r.normal(size=m) * 0.7, r.normal(size=1), np.zeros(n), n, m]
    bars = {0: r.normal(size=n), 1: np.zeros(m), 2: r.normal(size=1), 3: r.normal(size=n)}
    floats = [0, 1, 2, 3]

    def adjoint(items=None, tape=None):
        own = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
        shadows = {i: bars[i].copy() for i in floats}
        full = []
        for i, a in enumerate(own):
            full.append(a)
            if i in shadows:
                full.append(shadows[i])
        saved = ck.PRIVATE_ITEMS, zc.tape_size()
        try:
            if items is not None:
                ck.PRIVATE_ITEMS = items
            if tape is not None:
                zc.set_tape_size(tape)
            zyg.vjp(kern)[cfg](*full)
        finally:
            ck.PRIVATE_ITEMS = saved[0]
            zc.set_tape_size(saved[1])
        return own, shadows

    def launch(a):
        a = [x.copy() if isinstance(x, np.ndarray) else x for x in a]
        kern[cfg](*a)
        return a

    def objective(a):
        out = launch(a)
        return sum(float(np.sum(out[o] * bars[o])) for o in floats)

    label = f"kernel of seed {seed} ({what}):\n{src}"
    own, shadows = adjoint()
    ref = launch(args)
    for i in floats:
        assert _rel(own[i], ref[i]) <= 1e-12, f"{label}argument {i} after the adjoint"
    if _huge([ref[i] for i in floats]):
        return 0, 2 * len(floats)
    checked = unreliable = 0
    for i in floats:
        for _ in range(2):
            v = r.normal(size=args[i].shape)
            fd = []
            for h in (1e-6, 1e-5):
                up = list(args)
                dn = list(args)
                up[i] = args[i] + h * v
                dn[i] = args[i] - h * v
                fd.append((objective(up) - objective(dn)) / (2 * h))
            if abs(fd[0] - fd[1]) > 1e-5 * (1.0 + abs(fd[0])):
                unreliable += 1         # a branch or loop exit between the two steps
                continue
            got = float(np.sum(shadows[i] * v))
            assert abs(got - fd[0]) <= 1e-6 * (1.0 + abs(fd[0])), \
                f"{label}shadow of argument {i}: {got} against finite differences {fd[0]}"
            checked += 1
    for name, kw in (("shared-memory atomics", {"items": 0}), ("a 2-item tape", {"tape": 2})):
        own2, shadows2 = adjoint(**kw)
        for i in floats:
            assert _rel(shadows2[i], shadows[i]) <= 1e-12, \
                f"{label}shadow of argument {i} with {name} against the default"
            assert _rel(own2[i], ref[i]) <= 1e-12, f"{label}argument {i} with {name}"
    return checked, unreliable


def check_tape(seed: int, where: str):
    """A ``zyg.cuda.Tape`` over 3 to 6 launches of two generated kernels on three buffers
    (each launch reads one, writes another: buffers overwritten after earlier launches read
    them, ping-pong) sharing ``w`` and ``acc``: the gradients of the buffers' contents
    before the first launch against finite differences of the whole sequence."""
    import numpy as np
    import zyg
    from numba import cuda
    r = np.random.default_rng(seed)
    rr = random.Random(seed)
    kerns, srcs = [], []
    for j in (0, 1):
        src, what = kernel_source(1000003 + 2 * seed + j)
        srcs.append(f"# {what}\n{src}")
        kerns.append(cuda.jit(_load(src, 1000003 + 2 * seed + j, where)))
    n, m = int(r.integers(9, 25)), int(r.integers(2, 5))
    threads = int(r.choice([8, 16]))
    cfg = ((n + threads - 1) // threads, threads)
    steps = []
    for _ in range(rr.randint(3, 6)):
        a, b = rr.sample(range(3), 2)
        steps.append((rr.randrange(2), a, b))
    init = [r.normal(size=n) * 0.7 for _ in range(3)] + [r.normal(size=m) * 0.6,
                                                          r.normal(size=1)]
    bars = [r.normal(size=n) for _ in range(3)] + [np.zeros(m), r.normal(size=1)]

    def run(arrays, tape=None):
        for kk, a, b in steps:
            # (every launch writes all of its output: nothing is zeroed on the host, which
            # a tape would not see)
            if tape is not None:
                tape.launch(kerns[kk], cfg, arrays[a], arrays[3], arrays[4], arrays[b], n, m)
            else:
                kerns[kk][cfg](arrays[a], arrays[3], arrays[4], arrays[b], n, m)
        return arrays

    def objective(arrays):
        out = run([x.copy() for x in arrays])
        return sum(float(np.sum(o * bb)) for o, bb in zip(out, bars))

    label = f"tape of seed {seed}, steps (kernel, read, write) {steps}:\n" + "\n".join(srcs)
    arrays = [x.copy() for x in init]
    tape = zyg.cuda.Tape()
    run(arrays, tape)
    ref = run([x.copy() for x in init])
    for got, want in zip(arrays, ref):
        assert _rel(got, want) <= 1e-12, f"{label}recorded launches changed the results"
    if _huge(ref):
        return 0, 5
    # (a buffer no launch takes is unknown to the tape: naming it is an error)
    used = sorted({a for _, a, _ in steps} | {b for _, _, b in steps} | {3, 4})
    tape.backward(grads=[(arrays[i], bars[i]) for i in used if i != 3])
    grads = {i: np.array(tape.gradient(arrays[i])) for i in used}
    checked = unreliable = 0
    for i in used:
        v = r.normal(size=init[i].shape)
        fd = []
        for h in (1e-6, 1e-5):
            up = [x.copy() for x in init]
            dn = [x.copy() for x in init]
            up[i] += h * v
            dn[i] -= h * v
            fd.append((objective(up) - objective(dn)) / (2 * h))
        if abs(fd[0] - fd[1]) > 1e-5 * (1.0 + abs(fd[0])):
            unreliable += 1
            continue
        got = float(np.sum(grads[i] * v))
        assert abs(got - fd[0]) <= 1e-6 * (1.0 + abs(fd[0])), \
            f"{label}\ngradient of array {i}: {got} against finite differences {fd[0]}"
        checked += 1
    return checked, unreliable


# -- device gradients of numbers (zyg.vmap(zyg.grad(f), target="cuda")) --------------------

#: the statements a function of numbers is drawn from
SCALAR_PATTERNS = {
    "arith": ["s = s * {c} + math.sin(y * {c2}) - x / (1.5 + y * y)"],
    "counted": ["for k in range(3):", "    s = s * {c} + math.cos(x + k * {c2})"],
    "runtime_loop": ["for k in range(n):", "    s += math.sin(s * {c}) * y"],
    "while": ["t = abs(s) + 1.0", "while t > 0.3:", "    t = t * 0.5", "    s = s + y * t"],
    "branch": ["if s > x * {c2}:", "    s = s * s * 0.5 + y", "else:",
               "    s = math.tanh(s) - y * x"],
    "helper": ["s = _h(s, y)"],
    "break": ["for k in range(n):", "    s += y * {c}", "    if s > 2.0:", "        break"],
    "sqrt": ["s = s + math.sqrt(x * x + y * y + {c})"],
    "power": ["s = s + (x * {c}) ** 2 - s ** 3 * {c10}"],
}


def scalar_source(seed: int):
    r = random.Random(seed)
    kinds = [r.choice(list(SCALAR_PATTERNS)) for _ in range(r.randint(2, 5))]
    lines = ["import math", "", "",
             "def _h(a, b):",
             "    return a * math.exp(-b * b * 0.1) + b", "", "",
             "def f(x, y, n):",
             f"    s = x * {round(r.uniform(0.5, 1.5), 3)}"]
    for kind in kinds:
        lines += _stmt(SCALAR_PATTERNS, kind, r, "    ")
    lines.append("    return s")
    return "\n".join(lines) + "\n", ", ".join(kinds)


def check_device_gradient(seed: int, where: str):
    """``zyg.vmap(zyg.value_and_grad(f, (0, 1)), target="cuda")`` in reverse mode, forward
    mode, and reverse mode on a 2-item tape (relaunched with rows) against the cpu
    target's batch (1e-12) and finite differences; returns (checked, unreliable)."""
    import numpy as np
    import zyg
    src, what = scalar_source(seed)
    f = _load(src, seed, where, "zyg_cuda_scalar", "f")
    r = np.random.default_rng(seed)
    nb = 6
    xs, ys = r.uniform(-1.2, 1.2, nb), r.uniform(-1.2, 1.2, nb)
    n = int(r.integers(0, 5))
    label = f"function of seed {seed} ({what}), n = {n}:\n{src}"
    vg = zyg.value_and_grad(f, argnums=(0, 1))
    v_cpu, (gx_cpu, gy_cpu) = zyg.vmap(vg, target="cpu")(xs, ys, n)
    mode0, size0 = zyg.cuda.gradient_mode(), zyg.cuda.tape_size()
    try:
        for mode, size in (("reverse", size0), ("forward", size0), ("reverse", 2)):
            zyg.cuda.set_gradient_mode(mode)
            zyg.cuda.set_tape_size(size)
            v, (gx, gy) = zyg.vmap(vg, target="cuda")(xs, ys, n)
            for got, ref, name in ((v, v_cpu, "value"), (gx, gx_cpu, "d/dx"), (gy, gy_cpu, "d/dy")):
                assert _rel(got, ref) <= 1e-12, \
                    f"{label}{name} on cuda ({mode}, tape {size}) against cpu:\n{got}\n{ref}"
    finally:
        zyg.cuda.set_gradient_mode(mode0)
        zyg.cuda.set_tape_size(size0)
    assert _rel(v_cpu, [f(float(a), float(b), n) for a, b in zip(xs, ys)]) <= 1e-12, label
    checked = unreliable = 0
    for j in range(nb):
        for k, g in ((0, gx_cpu), (1, gy_cpu)):
            fd = []
            for h in (1e-6, 1e-5):
                up = [float(xs[j]), float(ys[j])]
                dn = list(up)
                up[k] += h
                dn[k] -= h
                fd.append((f(*up, n) - f(*dn, n)) / (2 * h))
            if not np.all(np.isfinite(fd)) or abs(fd[0] - fd[1]) > 1e-5 * (1.0 + abs(fd[0])):
                unreliable += 1
                continue
            assert abs(g[j] - fd[0]) <= 1e-6 * (1.0 + abs(fd[0])), \
                f"{label}gradient {k} at point {j}: {g[j]} against finite differences {fd[0]}"
            checked += 1
    return checked, unreliable


#: programs per family in CI (ZYG_CUDA_PROPERTY_N sets them all)
KERNELS, TAPES, FUNCTIONS = 10, 8, 10


def seeds(default: int = KERNELS):
    n = int(os.environ.get("ZYG_CUDA_PROPERTY_N", str(default)))
    base = int(os.environ.get("ZYG_CUDA_PROPERTY_SEED", "0"))
    return [base * 100003 + s for s in range(n)]


def _ptx_compiler():
    """tests/test_cuda_sim.py's driverless PTX compile (its module global ``cuda`` bound)."""
    import test_cuda_sim
    from numba import cuda
    test_cuda_sim.cuda = cuda
    return test_cuda_sim._ptx


def ptx_kernel(seed: int, where: str):
    """The adjoints the kernel family's launches build (:meth:`KernelAdjoint.plan`: sums of
    copies or shared atomics, the local tape or rows) compile to PTX: returns (kernels
    compiled, 0)."""
    import numba
    import numpy as np
    import zyg
    from numba import cuda
    from zyg import cuda_kernel as ck
    _ptx = _ptx_compiler()
    src, _ = kernel_source(seed)
    kern = cuda.jit(_load(src, seed, where))
    r = np.random.default_rng(seed)
    n, m = int(r.integers(9, 30)), int(r.integers(2, 6))
    threads = int(r.choice([8, 12, 16]))
    cfg = ((n + threads - 1) // threads, threads)
    own = [np.zeros(n), np.zeros(m), np.zeros(1), np.zeros(n), n, m]
    kinds, staged, private, block = zyg.vjp(kern).plan(cfg, own)
    f1, i8 = numba.float64[:], numba.int64
    done = 0

    def compile_(kern, kinds, staged, private, blk, rows):
        b = ck.build(kern, kinds, 256, staged, private, blk, rows)
        sig = (f1,) * 8 + (i8, i8) + ((numba.int64[:],) if b.checked else ()) + \
            tuple(numba.from_dtype(dt)[:, :] for _, dt in b.rows)
        _ptx(b.kernel.py_func, sig)
    for blk, rows in {(block, False), (0, False), (block, True)}:
        compile_(kern, kinds, staged, private, blk, rows)
        done += 1
    if seed in seeds(TAPES):
        # the two kernels of the tape family's program of this seed, as its launches
        # build them (its config and shapes: check_tape's first draws)
        r = np.random.default_rng(seed)
        n, m = int(r.integers(9, 25)), int(r.integers(2, 5))
        threads = int(r.choice([8, 16]))
        cfg = ((n + threads - 1) // threads, threads)
        own = [np.zeros(n), np.zeros(m), np.zeros(1), np.zeros(n), n, m]
        for j in (0, 1):
            src, _ = kernel_source(1000003 + 2 * seed + j)
            kern = cuda.jit(_load(src, 1000003 + 2 * seed + j, where))
            compile_(kern, *zyg.vjp(kern).plan(cfg, own), False)
            done += 1
    return done, 0


def ptx_device_gradient(seed: int, where: str):
    """The batch kernels of the device-gradient family (reverse, forward, reverse with the
    tape's rows) compile to PTX: returns (kernels compiled, 0)."""
    import numba
    import zyg
    from zyg import backends
    _ptx = _ptx_compiler()
    f = _load(scalar_source(seed)[0], seed, where, "zyg_cuda_scalar", "f")
    batch = zyg.vmap(zyg.value_and_grad(f, argnums=(0, 1)), target="cuda")._zyg_batch
    f1, i8 = numba.float64[:], numba.int64
    mode0 = zyg.cuda.gradient_mode()
    done = 0
    try:
        for mode, rows in (("reverse", False), ("forward", False), ("reverse", True)):
            zyg.cuda.set_gradient_mode(mode)
            backend = backends.get("cuda")
            kern, _, _, stacks = batch._kernel(["float", "float", "int"], [0, 0, None],
                                               backend.with_rows() if rows else backend)
            _ptx(kern.py_func, (f1, f1, i8, f1, f1, f1, numba.int64[:], i8) +
                 tuple(numba.from_dtype(dt)[:, :] for _, dt in stacks))
            done += 1
    finally:
        zyg.cuda.set_gradient_mode(mode0)
    return done, 0


FAMILIES = {"kernels": check_kernel, "device_gradients": check_device_gradient,
            "tapes": check_tape, "ptx_kernels": ptx_kernel,
            "ptx_device_gradients": ptx_device_gradient}


def run_child(family: str, out_path: str):
    """In the child (the simulator on): every program of ``family``, its outcome as JSON."""
    results = {}
    with tempfile.TemporaryDirectory() as where:
        sys.path.insert(0, HERE)
        for s in seeds(TAPES if family == "tapes" else
                       FUNCTIONS if "device" in family else KERNELS):
            try:
                results[str(s)] = {"ok": list(FAMILIES[family](s, where))}
            except BaseException:
                results[str(s)] = {"error": traceback.format_exc()}
    with open(out_path, "w") as fh:
        json.dump(results, fh)


def _family(family: str, tmp_path, least: int, simulated: bool = True):
    from test_cuda_sim import child_env
    out = str(tmp_path / "results.json")
    env = child_env(simulated)
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--run", family, out],
                          env=env, cwd=ROOT, capture_output=True, text=True, timeout=1200)
    assert os.path.exists(out), f"the child failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    with open(out) as fh:
        results = json.load(fh)
    errors = {s: r["error"] for s, r in results.items() if "error" in r}
    # the PTX families skip, as test_cuda_sim.py's PTX checks do, only where every program
    # raised _ptx's Skip: no CUDA toolkit (NVVM) on the machine to compile with
    skips = [e for e in errors.values() if "Skip: " in e]
    if not simulated and skips and len(skips) == len(errors) == len(results):
        import pytest
        pytest.skip(skips[0].strip().splitlines()[-1])
    assert not errors, "\n\n".join(errors.values())
    if family.startswith("ptx"):
        return
    checked = sum(r["ok"][0] for r in results.values())
    unreliable = sum(r["ok"][1] for r in results.values())
    print(f"{family}: {len(results)} programs, {checked} derivatives checked against finite "
          f"differences, {unreliable} unreliable")
    # the oracle must have checked most of them, or it checks nothing
    assert checked >= least * len(results) and checked > 3 * unreliable, (checked, unreliable)


def _on_device() -> bool:
    """``ZYG_CUDA_DEVICE=1``: the families run on the GPU instead of the simulator (as
    tests/test_cuda_sim.py's checks do)."""
    from test_cuda_sim import device_mode
    return device_mode()


def test_kernel_adjoints_on_generated_kernels(tmp_path):
    _family("kernels", tmp_path, 4, simulated=not _on_device())


def test_device_gradients_on_generated_functions(tmp_path):
    _family("device_gradients", tmp_path, 6, simulated=not _on_device())


def test_launch_tapes_on_generated_kernels(tmp_path):
    _family("tapes", tmp_path, 3, simulated=not _on_device())


def test_ptx_of_generated_kernel_adjoints(tmp_path):
    """Every adjoint the kernel family builds compiles to PTX (no GPU needed)."""
    _family("ptx_kernels", tmp_path, 0, simulated=False)


def test_ptx_of_generated_device_gradients(tmp_path):
    """Every batch kernel the device-gradient family builds compiles to PTX."""
    _family("ptx_device_gradients", tmp_path, 0, simulated=False)


if __name__ == "__main__" and "--run" in sys.argv:
    at = sys.argv.index("--run")
    run_child(sys.argv[at + 1], sys.argv[at + 2])
