"""Adjoints of whole CUDA kernels, and a time loop of launches on a tape (docs/cuda.md).

    python examples/cuda_kernels.py

A block-tiled stencil that stages its neighbourhood in shared memory, as numba.cuda users
write it, is differentiated as it stands: ``zyg.vjp(kernel)`` is its adjoint kernel, and
``zyg.cuda.Tape`` records a ping-pong time loop of its launches and runs their adjoints
backwards.  On a machine without a GPU it runs under numba's CUDA simulator (slow: a few
dozen points); with one, on the device.
"""
import os
import shutil
import subprocess


def _has_gpu() -> bool:
    smi = shutil.which("nvidia-smi")
    return bool(smi) and subprocess.run([smi, "-L"], capture_output=True).returncode == 0


if "NUMBA_ENABLE_CUDASIM" not in os.environ and not _has_gpu():
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"     # before numba is imported

import math                 # noqa: E402

import numba                # noqa: E402
import numpy as np          # noqa: E402
from numba import cuda      # noqa: E402

import zyg                  # noqa: E402

TPB = 16                    # threads per block


@cuda.jit
def step(u, un, k):
    """One explicit step of a nonlinear diffusion u_t = (k(u) u_x)_x, k(u) = k (1 + u^2)."""
    tile = cuda.shared.array(TPB + 2, numba.float64)     # the block's points and a halo
    t = cuda.threadIdx.x
    i = cuda.grid(1)
    n = u.shape[0]
    if i < n:
        tile[t + 1] = u[i]
        if t == 0:
            tile[0] = u[i - 1] if i > 0 else u[i]
        if t == TPB - 1 or i == n - 1:
            tile[t + 2] = u[i + 1] if i < n - 1 else u[i]
    cuda.syncthreads()
    if i < n:
        c = tile[t + 1]
        left = k * (1.0 + 0.5 * (c + tile[t]) ** 2) * (tile[t] - c)
        right = k * (1.0 + 0.5 * (c + tile[t + 2]) ** 2) * (tile[t + 2] - c)
        un[i] = c + left + right


def run(u0, steps, k):
    """The time loop: ping-pong between two buffers, as GPU codes do."""
    a, b = u0.copy(), np.zeros_like(u0)
    blocks = (u0.shape[0] + TPB - 1) // TPB
    for _ in range(steps):
        step[blocks, TPB](a, b, k)
        a, b = b, a
    return a


sim = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"
n, steps, k = (40, 3, 0.1) if sim else (1 << 16, 50, 0.1)
rng = np.random.default_rng(0)
u0 = np.sin(np.linspace(0.0, np.pi, n)) + 0.05 * rng.standard_normal(n)
blocks = (n + TPB - 1) // TPB

# 1. one launch: the adjoint kernel, launched with the kernel's configuration
out = np.zeros(n)
bar = rng.standard_normal(n)             # the cotangent of out after the launch
du, dout = np.zeros(n), bar.copy()
zyg.vjp(step)[blocks, TPB](u0.copy(), du, out, dout, k)
h = 1e-6
v = rng.standard_normal(n)
plus, minus = np.zeros(n), np.zeros(n)
step[blocks, TPB](u0 + h * v, plus, k)
step[blocks, TPB](u0 - h * v, minus, k)
fd = float(bar @ (plus - minus)) / (2 * h)
print(f"one launch:   <du, v> = {du @ v:.10f}, central difference {fd:.10f}")
assert abs(du @ v - fd) <= 1e-6 * (1 + abs(fd))

# 2. a time loop on a tape: the gradient of sum(u_T^2) with respect to u_0.  The buffers
# are overwritten every other step; the tape saves what the adjoints will need.
first, other = u0.copy(), np.zeros(n)
a, b = first, other
with zyg.cuda.Tape() as tape:
    for _ in range(steps):
        step[blocks, TPB](a, b, k)
        a, b = b, a
tape.backward(grads=[(a, 2.0 * a)])
g = tape.gradient(first)
fd = (np.sum(run(u0 + h * v, steps, k) ** 2) - np.sum(run(u0 - h * v, steps, k) ** 2)) / (2 * h)
print(f"{steps} steps:      <du0, v> = {g @ v:.10f}, central difference {fd:.10f}")
assert abs(g @ v - fd) <= 1e-6 * (1 + abs(fd))
print(f"{n} points on {'the simulator' if sim else 'the GPU'}")
