"""Property tests of kernel adjoints (``zyg.vjp(kernel)``, issue 25) under numba's simulator:
random kernels composed of what numba.cuda users write, each checked by three oracles.

A kernel here takes ``(x, w, acc, y, n, m)``: points ``x`` (read at the thread's row and,
in some kernels, its neighbours', or updated in place), a parameter vector ``w`` every
thread reads at the same places (a shared parameter), an atomic accumulator ``acc`` and an
output ``y``.  Its body is two to five statements drawn from: elementwise arithmetic,
neighbour reads, a loop over ``w``, a data-dependent ``while`` loop, a branch, an in-place
update of ``x[i]`` read again later, an atomic addition, and a local scratch array; under
an ``if i < n:`` block or after an early ``return``; on partial blocks.

The oracles, for each kernel:

* **finite differences**: every float array's shadow along two random directions against
  central differences of the kernel's launch (a direction where differences at two step
  sizes disagree crosses a branch or a loop exit: counted as unreliable, not checked);
* **the ways of summing shared parameters' shadows agree**: each thread's copy summed per
  block (the default) against atomics into shared memory (``PRIVATE_ITEMS = 0``);
* **the ways of keeping the tape agree**: a tape of two items, so that the launch runs
  short and is relaunched with the tape in rows of buffers, against the default tape;
* the arrays the adjoint leaves equal those of a plain launch.

Simulated threads are slow: the suite checks ``ZYG_CUDA_PROPERTY_N`` (default 14) kernels
from fixed seeds; ``ZYG_CUDA_PROPERTY_N=200 ZYG_CUDA_PROPERTY_SEED=7`` runs a longer,
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

#: (name, needs): the statements a kernel body is drawn from; ``needs`` says what it may
#: not be combined with (a neighbour read and an in-place update race: thread i + 1 reads
#: what thread i writes)
PATTERNS = ["elementwise", "neighbour", "shared_loop", "while", "branch", "inplace", "atomic",
            "local"]


def _stmt(kind, r: random.Random, ind: str):
    c = round(r.uniform(0.2, 0.9), 3)
    c2 = round(r.uniform(0.3, 1.5), 3)
    if kind == "elementwise":
        return [f"{ind}s = s * {c} + math.sin(x[i] * {c2})"]
    if kind == "neighbour":
        return [f"{ind}if i + 1 < n:",
                f"{ind}    s += x[i + 1] * {c}",
                f"{ind}if i > 0:",
                f"{ind}    s -= x[i - 1] * x[i] * {c2}"]
    if kind == "shared_loop":
        return [f"{ind}for k in range(m):",
                f"{ind}    s += w[k] * math.cos(s * {c} + x[i] * w[k])"]
    if kind == "while":
        return [f"{ind}t = abs(s) + 1.0",
                f"{ind}while t > 0.3:",
                f"{ind}    t = t * 0.5",
                f"{ind}    s = s + w[0] * t * x[i]"]
    if kind == "branch":
        return [f"{ind}if x[i] * {c2} > s:",
                f"{ind}    s = s * s * 0.5 + w[1]",
                f"{ind}else:",
                f"{ind}    s = math.tanh(s) - w[1] * x[i]"]
    if kind == "inplace":
        return [f"{ind}x[i] = x[i] * {c} + s * 0.25",
                f"{ind}s = s + x[i] * x[i]"]
    if kind == "atomic":
        return [f"{ind}cuda.atomic.add(acc, 0, s * x[i] * {c})"]
    if kind == "local":
        return [f"{ind}tmp = cuda.local.array(2, numba.float64)",
                f"{ind}tmp[0] = s * {c}",
                f"{ind}tmp[1] = x[i] + w[0]",
                f"{ind}s = tmp[0] * tmp[1] + s"]
    raise ValueError(kind)


def kernel_source(seed: int):
    """(source, description) of the kernel ``k`` of ``seed``."""
    r = random.Random(seed)
    kinds = [r.choice(PATTERNS) for _ in range(r.randint(2, 5))]
    if "inplace" in kinds and "neighbour" in kinds:
        kinds = [k for k in kinds if k != "neighbour"] or ["elementwise"]
    early = r.random() < 0.5
    lines = ["import math", "import numba", "from numba import cuda", "",
             "def k(x, w, acc, y, n, m):",
             "    i = cuda.grid(1)"]
    if early:
        lines += ["    if i >= n:", "        return"]
        ind = "    "
    else:
        lines += ["    if i < n:"]
        ind = "        "
        kinds = [k for k in kinds if k != "local"] or ["elementwise"]
    lines.append(f"{ind}s = x[i] * {round(r.uniform(0.5, 1.5), 3)}")
    for kind in kinds:
        lines += _stmt(kind, r, ind)
    lines.append(f"{ind}y[i] = s")
    return "\n".join(lines) + "\n", ("early return; " if early else "if i < n; ") + ", ".join(kinds)


def _load(src: str, seed: int, where: str):
    path = os.path.join(where, f"zyg_cuda_prop_{seed}.py")
    with open(path, "w") as fh:
        fh.write(src)
    spec = importlib.util.spec_from_file_location(f"zyg_cuda_prop_{seed}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.k


def _rel(a, b):
    import numpy as np
    a, b = np.asarray(a, float), np.asarray(b, float)
    return float(np.max(np.abs(a - b) / (1.0 + np.abs(b)))) if a.size else 0.0


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


def seeds():
    n = int(os.environ.get("ZYG_CUDA_PROPERTY_N", "14"))
    base = int(os.environ.get("ZYG_CUDA_PROPERTY_SEED", "0"))
    return [base * 100003 + s for s in range(n)]


def run_child(out_path: str):
    """In the child (the simulator on): every kernel, its outcome as JSON."""
    results = {}
    with tempfile.TemporaryDirectory() as where:
        for s in seeds():
            try:
                results[str(s)] = {"ok": list(check_kernel(s, where))}
            except BaseException:
                results[str(s)] = {"error": traceback.format_exc()}
    with open(out_path, "w") as fh:
        json.dump(results, fh)


def test_kernel_adjoints_on_generated_kernels(tmp_path):
    out = str(tmp_path / "results.json")
    env = dict(os.environ)
    env["NUMBA_ENABLE_CUDASIM"] = "1"
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--run", out], env=env,
                          cwd=ROOT, capture_output=True, text=True, timeout=1200)
    assert os.path.exists(out), f"the child failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    with open(out) as fh:
        results = json.load(fh)
    errors = {s: r["error"] for s, r in results.items() if "error" in r}
    assert not errors, "\n\n".join(errors.values())
    checked = sum(r["ok"][0] for r in results.values())
    unreliable = sum(r["ok"][1] for r in results.values())
    print(f"{len(results)} kernels: {checked} directions checked against finite "
          f"differences, {unreliable} unreliable")
    # the oracle must have checked most directions, or it checks nothing
    assert checked >= 4 * len(results) and checked > 3 * unreliable, (checked, unreliable)


if __name__ == "__main__" and "--run" in sys.argv:
    run_child(sys.argv[sys.argv.index("--run") + 1])
