"""Gradients on a CUDA device: J_2(z) and dJ_2/dz for a batch of points (docs/cuda.md).

    python examples/cuda_bessel.py

On a machine without a GPU it runs under numba's CUDA simulator (slow: a few dozen
points); with one, on the device.
"""
import math
import os
import shutil
import subprocess


def _has_gpu() -> bool:
    smi = shutil.which("nvidia-smi")
    return bool(smi) and subprocess.run([smi, "-L"], capture_output=True).returncode == 0


if "NUMBA_ENABLE_CUDASIM" not in os.environ and not _has_gpu():
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"     # before numba is imported

import numpy as np          # noqa: E402
from numba import cuda      # noqa: E402

import zyg                  # noqa: E402


def bessel_j(z, nu):
    """J_nu(z) by its power series: a while loop whose trip count depends on z."""
    x = z / 2.0
    s = x ** nu
    for j in range(2, nu + 1):
        s /= j
    o = s
    k = 0
    while abs(s) > 1e-17 * abs(o):
        k += 1
        s *= -x * x / (k * (k + nu))
        o += s
    return o


# 1. a device function, called from a kernel of your own
vg = zyg.value_and_grad(bessel_j, target="cuda")


@cuda.jit
def kernel(z, value, grad):
    i = cuda.grid(1)
    if i < z.shape[0]:
        value[i], grad[i] = vg(z[i], 2)


n = 32 if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1" else 4000
z = np.linspace(0.1, 10.0, n)
value, grad = np.zeros(n), np.zeros(n)
kernel[(n + 31) // 32, 32](z, value, grad)

# 2. the same batch without writing a kernel, on the device and on the cpu
g_cuda = zyg.vmap(zyg.grad(bessel_j), target="cuda")(z, 2)
g_cpu = zyg.vmap(zyg.grad(bessel_j), target="cpu")(z, 2)

# J_2' = (J_1 - J_3) / 2
ref = np.array([(bessel_j(x, 1) - bessel_j(x, 3)) / 2 for x in z])
print(f"{n} points on {'the simulator' if os.environ.get('NUMBA_ENABLE_CUDASIM') == '1' else 'the GPU'}")
print(f"J_2(5) = {value[np.argmin(abs(z - 5))]:.12f}  (Python: {bessel_j(z[np.argmin(abs(z - 5))], 2):.12f})")
print(f"max |kernel gradient - identity| = {np.max(np.abs(grad - ref)):.2e}")
print(f"max |vmap cuda - vmap cpu|       = {np.max(np.abs(g_cuda - g_cpu)):.2e}")
assert np.allclose(grad, ref, rtol=1e-10, atol=1e-12) and np.allclose(g_cuda, g_cpu, rtol=1e-12)
assert not math.isnan(float(grad.sum()))
