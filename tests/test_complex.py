"""Complex numbers (docs/complex.md): complex scalars and complex128 arrays, end to end.

The convention is PyTorch's: for a real loss L of z = x + iy, ``zyg.grad`` returns
dL/dx + i dL/dy (the direction of steepest ascent; JAX returns its conjugate).  Every
gradient here is compared with central finite differences that perturb the real and the
imaginary part of each complex input separately, on both targets.  The rules themselves
go through the generic checkers with complex samples (tests/test_rules.py,
tests/test_array_rules.py).
"""
from __future__ import annotations

import cmath
import math

import numpy as np
import pytest

import zyg

from conftest import TARGETS, cached

H = 1e-6


# --- finite differences in the convention ------------------------------------------------------
def _copy(args):
    return [a.copy() if isinstance(a, np.ndarray) else a for a in args]


def cfd(f, args, i, h=H):
    """dL/dRe + i dL/dIm of argument ``i`` (dL/da for a real one), element by element for arrays."""
    a = args[i]
    cplx = np.iscomplexobj(a)
    units = (1.0, 1j) if cplx else (1.0,)
    if not isinstance(a, np.ndarray):
        step = h * max(1.0, abs(a))
        g = 0j if cplx else 0.0
        for u in units:
            up, dn = _copy(args), _copy(args)
            up[i] = a + step * u
            dn[i] = a - step * u
            g += u * (float(f(*up)) - float(f(*dn))) / (2 * step)
        return g
    g = np.zeros(a.shape, a.dtype)
    for idx in np.ndindex(a.shape):
        step = h * max(1.0, abs(a[idx]))
        for u in units:
            up, dn = _copy(args), _copy(args)
            up[i][idx] += step * u
            dn[i][idx] -= step * u
            g[idx] += u * (float(f(*up)) - float(f(*dn))) / (2 * step)
    return g


def check(f, args, argnums=None, targets=TARGETS, rtol=1e-6):
    """zyg's gradient and value of ``f`` at ``args`` w.r.t. every float/complex argument
    equal finite differences; gradients have the argument's type; inputs stay unchanged."""
    args = tuple(args)
    if argnums is None:
        argnums = tuple(i for i, a in enumerate(args)
                        if isinstance(a, (float, complex)) or
                        (isinstance(a, np.ndarray) and a.dtype.kind in "fc"))
    y = float(f(*_copy(args)))
    scale = max(1.0, abs(y))
    for t in targets:
        before = _copy(args)
        v, gs = cached("value_and_grad", f, argnums, t)(*args)
        for a, b in zip(args, before):
            if isinstance(a, np.ndarray):
                np.testing.assert_array_equal(a, b, err_msg=f"[{t}] {f.__name__}: an input was changed")
        assert abs(v - y) <= 1e-12 * scale, f"[{t}] {f.__name__}: value {v} != {y}"
        for i, g in zip(argnums, gs):
            a = args[i]
            ref = cfd(f, args, i)
            if isinstance(a, np.ndarray):
                assert isinstance(g, np.ndarray) and g.dtype == a.dtype and g.shape == a.shape, \
                    f"[{t}] {f.__name__}: gradient {i} is {g!r}"
            else:
                assert isinstance(g, complex if isinstance(a, complex) else float), \
                    f"[{t}] {f.__name__}: gradient {i} of {a!r} is {g!r}"
            np.testing.assert_allclose(g, ref, rtol=rtol, atol=1e-8 * scale,
                                       err_msg=f"[{t}] {f.__name__}: d/d(argument {i})")


# --- the convention ------------------------------------------------------------------------------
def sq_abs(z):
    return z.real * z.real + z.imag * z.imag


def test_convention_is_pytorchs(target):
    """|z|^2 at 3+4i: dL/dx + i dL/dy = 6+8i (PyTorch's z.grad); JAX's grad gives 6-8i."""
    g = cached("grad", sq_abs, 0, target)(3.0 + 4.0j)
    assert g == 6.0 + 8.0j and isinstance(g, complex)
    # a gradient step z - lr * g decreases the loss
    z = 3.0 + 4.0j
    assert sq_abs(z - 0.1 * g) < sq_abs(z)


def test_grad_of_a_complex_output_raises(target):
    def holo(z):
        return z * z

    for maker in (zyg.grad, zyg.value_and_grad):
        with pytest.raises(zyg.TypeMismatch, match="complex number") as e:
            maker(holo, target=target)(0.5 + 0.5j)
        assert "pullback" in str(e.value)


def cmul(z, x):
    return z * z * x + 1j * x


def test_pullback_of_a_complex_output_takes_a_complex_dy(target):
    """back(dy) is the gradient of the real loss Re(conj(dy) * f): dy = 1 and dy = 1j give
    the derivatives of the real and the imaginary part of the output."""
    z, x = 0.3 + 0.4j, 0.7
    y, back = zyg.pullback(cmul, z, x, target=target)
    assert y == cmul(z, x)
    for dy in (1.0, 1j, 0.6 - 1.3j):
        gz, gx = back(dy)
        assert isinstance(gz, complex) and isinstance(gx, float)

        def loss(z_, x_):
            return (np.conj(dy) * cmul(z_, x_)).real
        np.testing.assert_allclose(gz, cfd(loss, (z, x), 0), rtol=1e-7)
        np.testing.assert_allclose(gx, cfd(loss, (z, x), 1), rtol=1e-7)
    # holomorphic in z: dz = conj(f'(z)) * dy
    assert back(1.0)[0] == pytest.approx(np.conj(2 * z * x))


def cexp_arr(z):
    return np.exp(z) * 2.0


def test_pullback_of_a_complex_array_output(target):
    z = np.array([0.1 + 0.2j, 0.3 - 0.1j, -0.4 + 0.5j])
    y, back = zyg.pullback(cexp_arr, z, target=target)
    dy = np.array([1.0 + 0j, 1j, 0.5 - 0.25j])
    (g,) = back(dy)
    assert g.dtype == np.complex128
    np.testing.assert_allclose(g, np.conj(2.0 * np.exp(z)) * dy, rtol=1e-14)


# --- scalars -------------------------------------------------------------------------------------
def s_arith(z):
    w = z * z + 1j * z - 2.5 / (z + 3.0)
    return abs(w) ** 2


def s_parts(z):
    return (np.exp(z) * z.conjugate()).real + z.imag * 2.0 + np.real(z * z) * np.imag(z)


def s_build(x, y):
    z = complex(x, y)
    return abs(cmath.sin(z)) + np.angle(z) + cmath.phase(z * z)


def s_promote(x, z):
    # x is real, promoted to complex: its gradient is the real part of a complex cotangent
    return abs(x * z + x) + (x / z).imag


def s_pow(z, w):
    return abs(z ** 3) + (z ** w).real + abs(2.0 ** z) + (z ** 0.5).imag


def s_np_funcs(z):
    a = np.sin(z) + np.cos(z) * np.tan(z) + np.sinh(z) - np.cosh(z) * np.tanh(z)
    b = np.arcsin(z) + np.arccos(z) + np.arctan(z) + np.arcsinh(z) + np.arccosh(z) + np.arctanh(z)
    c = np.exp(z) + np.expm1(z) + np.exp2(z) + np.log(z) + np.log2(z) + np.log10(z) + np.log1p(z)
    d = np.sqrt(z) + np.square(z) + np.reciprocal(z) + np.conj(z) * np.absolute(z)
    return (a * b).real + abs(c) + (d * 1j).imag


def s_cmath(z):
    a = cmath.exp(z) + cmath.log(z) + cmath.sqrt(z) + cmath.sin(z) * cmath.cos(z) + cmath.tan(z)
    b = cmath.asin(z) + cmath.acos(z) + cmath.atan(z) + cmath.sinh(z) + cmath.cosh(z) + cmath.tanh(z)
    c = cmath.asinh(z) + cmath.acosh(z) + cmath.atanh(z) + cmath.log10(z) + cmath.rect(abs(z), 0.3)
    return abs(a + b) + (c * b).real


def s_loop(z, x, n):
    # a complex value carried through a loop (complex residuals on the tape)
    w = 0j
    for k in range(n):
        w = w * z + x / (k + 1)
        if w.real > 2.0:
            w = w * 0.5j
    return abs(w)


def s_branch_join(x, z, flag):
    # w is float on one path and complex on the other: the merged value is complex
    w = x * 2.0
    if flag:
        w = z * x
    return abs(w + 1.0) ** 2


SCALAR_CASES = [
    (s_arith, (0.3 + 0.7j,)),
    (s_arith, (-1.2 - 0.4j,)),
    (s_parts, (0.3 - 0.2j,)),
    (s_build, (0.4, 0.9)),
    (s_promote, (0.7, 0.2 + 0.5j)),
    (s_pow, (0.6 + 0.8j, 0.4 - 0.3j)),
    (s_np_funcs, (0.6 + 0.4j,)),
    (s_cmath, (0.6 + 0.4j,)),
    (s_loop, (0.5 + 0.6j, 0.8, 7)),
    (s_branch_join, (0.7, 0.3 - 0.4j, True)),
    (s_branch_join, (0.7, 0.3 - 0.4j, False)),
]


@pytest.mark.parametrize("f,args", SCALAR_CASES, ids=lambda v: getattr(v, "__name__", ""))
def test_scalar_functions(f, args):
    check(f, args)


def test_gradient_of_an_unused_complex_argument_is_a_complex_zero(target):
    def f(x, z):
        return x * x

    _, g = cached("value_and_grad", f, (0, 1), target)(0.5, 1.0 + 2.0j)
    assert g == (1.0, 0j) and isinstance(g[1], complex)


def test_math_functions_reject_complex_numbers():
    def f(z):
        return math.sin(z.real) + abs(math.exp(z))

    with pytest.raises(zyg.TypeMismatch, match="math.exp is called with complex numbers") as e:
        zyg.grad(f, target="python")(0.5 + 0.5j)
    assert "cmath" in str(e.value)


# --- arrays --------------------------------------------------------------------------------------
RNG = np.random.default_rng(7)


def crand(*shape):
    return RNG.normal(size=shape) + 1j * RNG.normal(size=shape)


def a_energy(z):
    return np.sum(np.abs(z) ** 2)


def a_loop_reads(z):
    s = 0.0
    for i in range(z.shape[0]):
        s += (z[i] * z[i]).real + abs(z[i] - 1j)
    return s


def a_mixed_broadcast(x, z):
    # a float (3, 4) array times a complex row: broadcasting and promotion
    w = x * z + np.exp(z) - x / (z + 2.0)
    return np.sum(np.real(w * np.conj(w))) + np.sum(np.imag(w))


def a_fill_zeros(z):
    y = np.zeros(z.shape[0], dtype=np.complex128)
    for i in range(z.shape[0]):
        y[i] = z[i] * 2.0 + 1j * z[i] * z[i]
    return np.sum(np.abs(y))


def a_empty_like_and_concat(z):
    e = np.empty_like(z)
    for i in range(z.shape[0]):
        e[i] = z[z.shape[0] - 1 - i] * (i + 1.0)
    c = np.concatenate((z[0::2], z[1::2], e))
    return np.sum(c.real * c.imag) + abs(np.sum(c))


def a_dot(a, b, v):
    m = np.dot(a, b) @ v
    return np.sum(np.abs(m) ** 2) + np.abs(np.dot(v, v))


def a_inplace_arg(z, x):
    # writes into the caller's complex array: rewound by the backward pass
    for i in range(z.shape[0]):
        z[i] = z[i] * z[i] + x
    z[0] += 1j * x
    z *= 0.5 + 0.5j
    return np.sum(np.abs(z) ** 2)


def a_parts(z):
    return np.sum(z.real * z.imag) + np.sum(np.angle(z)) + np.sum(z.conj() * z).real


def a_2d(z):
    s = 0j
    for i in range(z.shape[0]):
        for j in range(z.shape[1]):
            s += z[i, j] * z[j, i] * (i - j + 0.5)
    return abs(s) + np.sum(np.abs(z.T @ z))


def a_3d(z):
    return np.sum(np.abs(np.sin(z[:, 1:, ::2])) ** 2) + abs(np.sum(z * z))


# (function, arguments, also on target "cpu"): numba compiles an array gradient in
# about 5 s, so a representative half runs on cpu (the rule checkers add more)
ARRAY_CASES = [
    (a_energy, (crand(5),), False),
    (a_loop_reads, (crand(6),), True),
    (a_mixed_broadcast, (RNG.normal(size=(3, 4)), crand(4)), True),
    (a_fill_zeros, (crand(5),), False),
    (a_empty_like_and_concat, (crand(6),), True),
    (a_dot, (crand(3, 4), crand(4, 2), crand(2)), False),
    (a_inplace_arg, (crand(4), 0.3), True),
    (a_parts, (crand(3, 2),), True),
    (a_2d, (crand(3, 3),), False),
    (a_3d, (crand(2, 3, 4),), False),
]


@pytest.mark.parametrize("f,args,cpu", ARRAY_CASES, ids=lambda v: getattr(v, "__name__", ""))
def test_array_functions(f, args, cpu):
    check(f, args, targets=TARGETS if cpu else ("python",))


# --- Fourier transforms written as loops ---------------------------------------------------------
def dft_loss(x):
    """|DFT(x)|^2 weighted by frequency, with the DFT written as two loops."""
    n = x.shape[0]
    X = np.zeros(n, dtype=np.complex128)
    for k in range(n):
        acc = 0j
        for j in range(n):
            acc += x[j] * cmath.exp(-2j * math.pi * k * j / n)
        X[k] = acc
    return np.sum((np.arange(n) + 1.0) * np.abs(X) ** 2)


def fft_loss(x):
    """The same loss through an iterative radix-2 FFT: the input is split into evens and
    odds (x[0::2], x[1::2]) level by level, then the butterflies run in place."""
    n = x.shape[0]
    a = np.concatenate((x[0::2], x[1::2]))
    b = np.empty_like(a)
    L = n // 2
    while L > 1:
        h = L // 2
        for lo in range(0, n, L):
            b[lo:lo + h] = a[lo:lo + L:2]
            b[lo + h:lo + L] = a[lo + 1:lo + L:2]
        a, b = b, a
        L = h
    L = 2
    while L <= n:
        h = L // 2
        for lo in range(0, n, L):
            for k in range(h):
                t = cmath.exp(-2j * math.pi * k / L) * a[lo + k + h]
                e = a[lo + k]
                a[lo + k] = e + t
                a[lo + k + h] = e - t
        L = L * 2
    return np.sum((np.arange(n) + 1.0) * np.abs(a) ** 2)


def _analytic(x):
    """Gradient of sum(w |F x|^2) in the convention: 2 F^H (w * F x) = 2 n ifft(w * fft(x))."""
    n = x.shape[0]
    return 2.0 * n * np.fft.ifft((np.arange(n) + 1.0) * np.fft.fft(x))


@pytest.mark.parametrize("loss", [dft_loss, fft_loss])
def test_fourier_transform_loops(loss):
    x = crand(8)
    assert loss(x) == pytest.approx((_analytic(x) @ np.conj(x)).real / 2.0, rel=1e-12)
    check(loss, (x,))
    for n in (8, 16):
        x = crand(n)
        for t in TARGETS:
            _, g = cached("value_and_grad", loss, 0, t)(x)
            np.testing.assert_allclose(g, _analytic(x), rtol=1e-11, atol=1e-9 * n * n)


def bitrev_perm(x):
    """The even/odd split of fft_loss on a real array (a slice write whose value is a
    strided view, in a nested loop: its view indices must be recorded for the adjoint)."""
    n = x.shape[0]
    a = x.copy()
    b = np.empty_like(a)
    L = n
    while L > 1:
        h = L // 2
        for lo in range(0, n, L):
            b[lo:lo + h] = a[lo:lo + L:2]
            b[lo + h:lo + L] = a[lo + 1:lo + L:2]
        a, b = b, a
        L = h
    return np.sum(a * (np.arange(n) + 1.0))


def test_bit_reversal_by_slices_real():
    x = RNG.normal(size=8)
    check(bitrev_perm, (x,))
    perm = [0, 4, 2, 6, 1, 5, 3, 7]
    for t in TARGETS:
        np.testing.assert_array_equal(cached("grad", bitrev_perm, 0, t)(x),
                                      np.argsort(perm) + 1.0)


# --- against PyTorch's complex autograd ----------------------------------------------------------
def torch_case(z, w):
    u = z * w + np.exp(z) / (w + 2.0)
    return np.sum(np.abs(u) ** 2) + np.sum(np.real(u * np.conj(z))) + np.sum(np.angle(w))


def test_agrees_with_pytorch(target):
    torch = pytest.importorskip("torch", reason="torch (the 'bench' extra) is not installed")
    z, w = crand(5), crand(5)
    _, (gz, gw) = cached("value_and_grad", torch_case, (0, 1), target)(z, w)
    tz = torch.tensor(z, requires_grad=True)
    tw = torch.tensor(w, requires_grad=True)
    u = tz * tw + torch.exp(tz) / (tw + 2.0)
    loss = torch.sum(torch.abs(u) ** 2) + torch.sum(torch.real(u * torch.conj(tz))) + \
        torch.sum(torch.angle(tw))
    loss.backward()
    np.testing.assert_allclose(gz, tz.grad.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(gw, tw.grad.numpy(), rtol=1e-12, atol=1e-12)
    # and, as a scalar: PyTorch's 6+8i for |z|^2 at 3+4i
    s = torch.tensor(3.0 + 4.0j, requires_grad=True)
    (s.real ** 2 + s.imag ** 2).backward()
    assert complex(s.grad) == cached("grad", sq_abs, 0, target)(3.0 + 4.0j)


# --- errors --------------------------------------------------------------------------------------
def test_complex64_arrays_are_rejected():
    with pytest.raises(zyg.TypeMismatch, match="complex128"):
        zyg.grad(a_energy, target="python")(np.ones(3, np.complex64))
