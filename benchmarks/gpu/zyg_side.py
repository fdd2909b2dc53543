"""zyg's gradients of the four GPU workloads, as a user would call them on the anchors' own
PRIMAL kernels (imported from ``gpu_anchors/kernels.py`` at run time, never copied here).

Imported by ``run.py`` after it has chosen the simulator or the GPU (``NUMBA_ENABLE_CUDASIM``
must be set before numba is imported) and put the anchors folder on ``sys.path``.

Every ``grad()`` here is "value and gradient from the inputs, shadows zeroed inside the
call", like the anchors' hand-written calls:

* Bessel, adjoint kernel: one launch of ``seed_k`` (dz = 0, dout = 1: Enzyme's convention, the
  output shadow holds the cotangent on entry) and one of ``zyg.vjp(bessel_primal_k)``;
* Bessel, batch: ``zyg.vmap(zyg.value_and_grad(j2), target="cuda")(z_device, 2)`` (forward
  mode: ``zyg.cuda.gradient_mode()`` is ``auto``, and j2 has one differentiated argument);
* heat: ``zyg.cuda.Tape`` over the T launches of ``heat_step_k`` (ping-pong), the loss
  sum(u_T^2) on the host, ``tape.backward(grads=[(u_T, 2 u_T)])``, ``tape.gradient(u0)``;
* XS: one launch zeroing the shadows and the loss, one of ``zyg.vjp(xs_lookup_k)`` with the
  loss shadow 1 (it stays 1: an atomic addition's adjoint reads its shadow without zeroing it);
* GMM: ``zyg.cuda.Tape`` over ``gmm_prep_k`` and ``gmm_primal_k``, backward with the cotangent
  1 on acc[0] (the loss), gradients of mu, lv and alpha.
"""
import numpy as np
from numba import cuda

import common as C          # noqa: E402  (the anchors, on sys.path)
import kernels as K         # noqa: E402

import zyg

NU = C.NU
BLOCK = K.BLOCK


def j2(z, nu):
    """J_nu(z) by its power series: the anchors' primal kernel body as a plain function (the
    same function as scripts/cuda_device_check.py and tests/test_cuda_sim.py)."""
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


@cuda.jit
def seed_k(dz, dout):
    """dz = 0 (the input's shadow accumulates), dout = 1 (the output's cotangent)."""
    i = cuda.grid(1)
    if i < dz.shape[0]:
        dz[i] = 0.0
        dout[i] = 1.0


@cuda.jit
def zero_k(a):
    i = cuda.grid(1)
    stride = cuda.gridsize(1)
    while i < a.shape[0]:
        a[i] = 0.0
        i += stride


def grid_for(n, block=BLOCK):
    return (n + block - 1) // block


class Bessel:
    """zyg's adjoint of the anchors' ``bessel_primal_k`` and zyg's batched device gradient."""

    def __init__(self, z):
        self.n = n = z.shape[0]
        self.z = cuda.to_device(z)
        self.out = cuda.device_array(n)
        self.dz = cuda.device_array(n)
        self.dout = cuda.device_array(n)
        g = grid_for(n)
        self.kseed = seed_k[g, BLOCK]
        self.adj = zyg.vjp(K.bessel_primal_k)[g, BLOCK]
        self.vg = zyg.vmap(zyg.value_and_grad(j2), target="cuda")

    def grad_adjoint(self):
        self.kseed(self.dz, self.dout)
        self.adj(self.z, self.dz, self.out, self.dout, NU)

    def grad_vmap(self):
        self.vals, self.grads = self.vg(self.z, NU)

    def grad_vmap_reverse(self):
        """The same batch with the device gradient in reverse mode (a per-thread tape), for
        the comparison with ``auto``'s forward mode (``zyg.cuda.set_gradient_mode``)."""
        old = zyg.cuda.gradient_mode()
        zyg.cuda.set_gradient_mode("reverse")
        try:
            self.vals_r, self.grads_r = self.vg(self.z, NU)
        finally:
            zyg.cuda.set_gradient_mode(old)


class Heat:
    """zyg's gradient of sum(u_T^2) w.r.t. u0 through a ``zyg.cuda.Tape`` over T launches of
    the anchors' ``heat_step_k`` (ping-pong buffers).  alpha is a number: kernel adjoints give
    shadows to arrays only, so there is no d/dalpha."""

    def __init__(self, u0, alpha, T):
        self.n = n = u0.shape[0]
        self.T = T
        self.alpha = float(alpha)
        self.u0 = cuda.to_device(u0)
        self.ua = cuda.device_array(n)
        self.ub = cuda.device_array(n)
        self.kstep = K.heat_step_k[grid_for(n), BLOCK]

    def grad(self):
        tape = zyg.cuda.Tape()
        with tape:
            a, b = self.u0, self.ua
            for _ in range(self.T):
                self.kstep(a, b, self.alpha)
                a, b = b, (self.ub if b is self.ua else self.ua)
        uT = a.copy_to_host()
        self.loss = float(np.dot(uT, uT))
        tape.backward(grads=[(a, 2.0 * uT)])
        self.du0 = tape.gradient(self.u0)
        self.tape = tape


class XS:
    """zyg's adjoint of the anchors' ``xs_lookup_k``, loss shadow 1, results' shadow 0.  The
    adjoint kernel gives every float array a shadow, so it also computes d/degrid and
    d/denergies (work the hand-written kernel does not do)."""

    def __init__(self, egrid, xs, energies):
        self.N = N = energies.shape[0]
        G = egrid.shape[0]
        ch = xs.shape[1]
        self.egrid = cuda.to_device(egrid)
        self.xs = cuda.to_device(xs)
        self.energies = cuda.to_device(energies)
        self.results = cuda.device_array((N, ch))
        self.dresults = cuda.to_device(np.zeros((N, ch)))   # the adjoint leaves it zero
        self.dloss = cuda.to_device(np.ones(1))             # stays 1 (atomic addition)
        # one buffer zeroed by one launch: [loss | degrid | dxs | denergies]
        self.buf = cuda.device_array(1 + G + G * ch + N)
        self.loss = self.buf[0:1]
        self.degrid = self.buf[1:1 + G]
        self.dxs = self.buf[1 + G:1 + G + G * ch].reshape((G, ch))
        self.denergies = self.buf[1 + G + G * ch:]
        self.kzero = zero_k[min(grid_for(self.buf.shape[0]), 4096), BLOCK]
        self.adj = zyg.vjp(K.xs_lookup_k)[grid_for(N), BLOCK]

    def grad(self):
        self.kzero(self.buf)
        self.adj(self.egrid, self.degrid, self.xs, self.dxs, self.energies, self.denergies,
                 self.results, self.dresults, self.loss, self.dloss)


class GMM:
    """zyg's gradient through a ``zyg.cuda.Tape`` over the anchors' ``gmm_prep_k`` and
    ``gmm_primal_k``, w.r.t. mu, lv and alpha (the adjoints also give dX and the shadows of
    the intermediate iv and cst)."""

    def __init__(self, X, mu, lv, alpha):
        self.N = X.shape[0]
        self.X = cuda.to_device(X)
        self.mu = cuda.to_device(mu)
        self.lv = cuda.to_device(lv)
        self.alpha = cuda.to_device(alpha)
        self.iv = cuda.device_array((K.K, K.D))
        self.cst = cuda.device_array(K.K)
        self.acc = cuda.device_array(1 + K.P)
        self.seed = np.zeros(1 + K.P)
        self.seed[0] = 1.0
        self.kprep = K.gmm_prep_k[1, K.GBLOCK]
        self.kprimal = K.gmm_primal_k[grid_for(self.N, K.GBLOCK), K.GBLOCK]

    def grad(self):
        tape = zyg.cuda.Tape()
        with tape:
            self.kprep(self.mu, self.lv, self.alpha, self.iv, self.cst, self.acc)
            self.kprimal(self.X, self.mu, self.iv, self.cst, self.acc)
        self.loss = float(self.acc.copy_to_host()[0])
        tape.backward(grads=[(self.acc, self.seed)])
        self.dmu = tape.gradient(self.mu)
        self.dlv = tape.gradient(self.lv)
        self.dalpha = tape.gradient(self.alpha)
        self.tape = tape

    def grad_shared_atomics(self):
        """The same gradient, the shared parameters' shadows added atomically into shared
        memory contribution by contribution (no per-thread copies): what the adjoint did
        before it summed copies per block."""
        from zyg import cuda_kernel
        saved = cuda_kernel.PRIVATE_ITEMS
        cuda_kernel.PRIVATE_ITEMS = 0
        try:
            self.grad()
        finally:
            cuda_kernel.PRIVATE_ITEMS = saved
