"""``zyg.torch.function`` (docs/interop.md): zyg functions inside PyTorch's autograd.

Gradients are checked with ``torch.autograd.gradcheck`` (finite differences in float64)
and against PyTorch's own autograd of an equivalent torch expression; a small training
loop of an ``nn.Module`` whose loss is a zyg function of a loop with in-place updates must
lower the loss and give PyTorch's gradients at every step.  The functions are defined at
module level, so each compiles once for the whole file.
"""
from __future__ import annotations

import re
import runpy
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is the interop extra: pip install \".[interop]\"")

import zyg  # noqa: E402
from zyg.interop import common  # noqa: E402

F64 = torch.float64


# -- the functions (plain numba-style Python) ---------------------------------------------------

def chain_energy(x, k):
    """Springs between consecutive points: a scalar of a float array and a float."""
    e = 0.0
    for i in range(x.shape[0] - 1):
        d = x[i + 1] - x[i]
        e += k * d * d
    return e


def torch_chain_energy(x, k):
    return k * ((x[1:] - x[:-1]) ** 2).sum()


def scaled_sines(x, w, n):
    """An array result of two arrays and an int (a power), written into a local array."""
    out = np.zeros_like(x)
    for i in range(x.shape[0]):
        out[i] = np.sin(x[i]) * w[i] ** n
    return out


def torch_scaled_sines(x, w, n):
    return torch.sin(x) * w ** n


def smoothed_residual(y, target, lam):
    """A loss over points: residuals updated in place by a neighbour term, then squared."""
    r = np.zeros_like(y)
    for i in range(y.shape[0]):
        r[i] = y[i] - target[i]
    for i in range(1, y.shape[0]):
        r[i] += lam * (y[i] - y[i - 1])
    s = 0.0
    for i in range(y.shape[0]):
        s += r[i] * r[i]
    return s / y.shape[0]


def torch_smoothed_residual(y, target, lam):
    r = y - target
    r = torch.cat([r[:1], r[1:] + lam * (y[1:] - y[:-1])])
    return (r * r).sum() / y.shape[0]


def doubles_first(x):
    """Writes into its argument: zyg must be given a copy, never the tensor's memory."""
    x[0] = x[0] * 2.0
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] * x[i]
    return s


def moments(x, idx):
    """A tuple result (an array and a number); ``idx`` an integer array it reads."""
    m = np.empty(2)
    m[0] = 0.0
    m[1] = 0.0
    for j in range(idx.shape[0]):
        v = x[idx[j]]
        m[0] += v
        m[1] += v * v
    return m, np.sum(x * x * x)


def identity(x):
    return x


def times(a, b):
    return a * b


ENERGY = zyg.torch.function(chain_energy, argnums=0)
SINES = zyg.torch.function(scaled_sines)                # every float tensor
SINES_W = zyg.torch.function(scaled_sines, argnums=1)
LOSS = zyg.torch.function(smoothed_residual, argnums=0)
DOUBLES = zyg.torch.function(doubles_first)
MOMENTS = zyg.torch.function(moments, argnums=0)


def _points(n=6, seed=0, dtype=F64):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, generator=g, dtype=F64).to(dtype)


# -- gradients -----------------------------------------------------------------------------------

def test_scalar_result_gradcheck_and_torch_autograd():
    x = _points().requires_grad_()
    assert torch.autograd.gradcheck(lambda x: ENERGY(x, 0.7), (x,))
    y = ENERGY(x, 0.7)
    assert y.dtype == F64 and y.shape == ()
    y.backward()
    xr = x.detach().clone().requires_grad_()
    ref = torch_chain_energy(xr, 0.7)
    ref.backward()
    torch.testing.assert_close(y.detach(), ref.detach(), rtol=1e-14, atol=0.0)
    torch.testing.assert_close(x.grad, xr.grad, rtol=1e-13, atol=1e-15)


def test_array_result_two_tensors_and_an_int_extra():
    x = _points(5, 1).requires_grad_()
    w = (_points(5, 2).abs() + 0.5).requires_grad_()
    assert torch.autograd.gradcheck(lambda x, w: SINES(x, w, 3), (x, w))
    dy = _points(5, 3)
    out = SINES(x, w, 3)
    gx, gw = torch.autograd.grad(out, (x, w), dy)
    xr, wr = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    ref = torch_scaled_sines(xr, wr, 3)
    rx, rw = torch.autograd.grad(ref, (xr, wr), dy)
    torch.testing.assert_close(out.detach(), ref.detach(), rtol=1e-14, atol=1e-15)
    torch.testing.assert_close(gx, rx, rtol=1e-13, atol=1e-15)
    torch.testing.assert_close(gw, rw, rtol=1e-13, atol=1e-15)


def test_argnums_selects_the_arguments_that_get_gradients():
    x = _points(5, 1).requires_grad_()
    w = (_points(5, 2).abs() + 0.5).requires_grad_()
    SINES_W(x, w, 2).sum().backward()
    assert x.grad is None                      # not in argnums: a constant here
    ref = torch.sin(x.detach()) * 2 * w.detach()
    torch.testing.assert_close(w.grad, ref, rtol=1e-13, atol=1e-15)
    # negative positions count from the end, as in zyg.grad; a tuple selects several
    w.grad = None
    f = zyg.torch.function(scaled_sines, argnums=(-2, 0))
    f(x, w, 2).sum().backward()
    torch.testing.assert_close(w.grad, ref, rtol=1e-13, atol=1e-15)
    torch.testing.assert_close(x.grad, torch.cos(x.detach()) * w.detach() ** 2, rtol=1e-13, atol=1e-15)


def test_only_the_tensors_that_require_grad_get_one():
    x = _points(5, 1)                           # a constant tensor
    w = (_points(5, 2).abs() + 0.5).requires_grad_()
    out = SINES(x, w, 2)
    assert out.requires_grad
    out.sum().backward()
    assert x.grad is None
    torch.testing.assert_close(w.grad, torch.sin(x) * 2 * w.detach(), rtol=1e-13, atol=1e-15)
    # nothing requires grad, or no_grad: a plain tensor, no graph
    plain = SINES(x, w.detach(), 2)
    assert plain.grad_fn is None and not plain.requires_grad
    with torch.no_grad():
        nog = SINES(x, w, 2)
    assert nog.grad_fn is None
    torch.testing.assert_close(nog, out.detach(), rtol=0.0, atol=0.0)


def test_non_tensor_extras_are_passed_through():
    x = _points(5, 1).requires_grad_()
    w = np.abs(_points(5, 2).numpy()) + 0.5      # a numpy array: a constant
    w0 = w.copy()
    out = SINES(x, w, 2)
    out.sum().backward()
    np.testing.assert_array_equal(w, w0)
    torch.testing.assert_close(x.grad, torch.cos(x.detach()) * torch.from_numpy(w) ** 2,
                               rtol=1e-13, atol=1e-15)


def test_non_contiguous_tensors():
    base = torch.randn(6, 3, dtype=F64, generator=torch.Generator().manual_seed(4))
    xs = base.clone().requires_grad_()
    col = xs[:, 1]                               # a view with stride 3, inside the graph
    assert not col.is_contiguous()
    y = ENERGY(col, 0.3)
    y.backward()
    xr = base[:, 1].clone().requires_grad_()
    ref = torch_chain_energy(xr, 0.3)
    ref.backward()
    torch.testing.assert_close(y.detach(), ref.detach(), rtol=1e-14, atol=0.0)
    expect = torch.zeros_like(base)
    expect[:, 1] = xr.grad
    torch.testing.assert_close(xs.grad, expect, rtol=1e-13, atol=1e-15)
    leaf = base.detach().clone()[:, 1].requires_grad_()
    assert not leaf.is_contiguous()
    assert torch.autograd.gradcheck(lambda c: ENERGY(c, 0.3), (leaf,))


def test_a_function_that_writes_into_its_argument_never_changes_the_tensor():
    x = torch.tensor([1.0, 2.0, 3.0], dtype=F64, requires_grad=True)
    y = DOUBLES(x)
    torch.testing.assert_close(x.detach(), torch.tensor([1.0, 2.0, 3.0], dtype=F64), rtol=0, atol=0)
    assert y.item() == 4.0 + 4.0 + 9.0
    y.backward()
    torch.testing.assert_close(x.grad, torch.tensor([8.0, 4.0, 6.0], dtype=F64), rtol=0, atol=0)
    torch.testing.assert_close(x.detach(), torch.tensor([1.0, 2.0, 3.0], dtype=F64), rtol=0, atol=0)
    assert torch.autograd.gradcheck(DOUBLES, (_points(4, 5).requires_grad_(),))
    # the analysis behind it: only the written argument is copied
    a = np.ones(3)
    assert common.written_arguments(doubles_first, [a], "cpu") == (0,)
    assert common.written_arguments(scaled_sines, [a, a.copy(), 2], "cpu") == ()
    assert common.written_arguments(chain_energy, [a, 0.5], "cpu") == ()


def test_tuple_result_with_an_integer_index_array():
    x = (_points(5, 6)).requires_grad_()
    idx = torch.tensor([0, 2, 2, 4])
    assert torch.autograd.gradcheck(lambda x: MOMENTS(x, idx), (x,))
    m, c = MOMENTS(x, idx)
    assert m.shape == (2,) and c.shape == () and m.dtype == c.dtype == F64
    (m[1] + 3.0 * m[0] + c).backward()
    xr = x.detach().clone().requires_grad_()
    v = xr[idx]
    (torch.sum(v * v) + 3.0 * torch.sum(v) + torch.sum(xr ** 3)).backward()
    torch.testing.assert_close(x.grad, xr.grad, rtol=1e-13, atol=1e-15)


def test_zero_dim_tensors_and_the_python_target():
    a = torch.tensor(1.5, dtype=F64, requires_grad=True)
    b = torch.tensor(-2.0, dtype=F64, requires_grad=True)
    for target in ("python", "cpu"):
        a.grad = b.grad = None
        y = zyg.torch.function(times, target=target)(a, b)
        assert y.shape == () and y.item() == -3.0
        y.backward()
        assert a.grad.item() == -2.0 and b.grad.item() == 1.5
        assert a.grad.shape == () and a.grad.dtype == F64
    x = _points(5, 7).requires_grad_()
    py = zyg.torch.function(scaled_sines, target="python")
    torch.testing.assert_close(py(x, x.detach().abs() + 0.5, 2), SINES(x, x.detach().abs() + 0.5, 2),
                               rtol=1e-14, atol=1e-15)


def test_float32_tensors():
    x64 = _points(6, 8)
    x32 = x64.float().requires_grad_()
    y = ENERGY(x32, 0.7)
    assert y.dtype == torch.float32
    y.backward()
    assert x32.grad.dtype == torch.float32
    xr = x64.clone().requires_grad_()
    torch_chain_energy(xr, 0.7).backward()
    torch.testing.assert_close(x32.grad, xr.grad.float(), rtol=1e-5, atol=1e-6)
    w32 = (x64.abs() + 0.5).float().requires_grad_()
    out = SINES(x32, w32, 2)
    assert out.dtype == torch.float32
    gx, gw = torch.autograd.grad(out.sum(), (x32, w32))
    assert gx.dtype == gw.dtype == torch.float32
    torch.testing.assert_close(gw, (torch.sin(x32) * 2 * w32).detach(), rtol=1e-5, atol=1e-6)


def test_training_loop_matches_torch_autograd():
    torch.manual_seed(0)
    n = 24
    t = torch.linspace(-1.0, 1.0, n, dtype=F64)
    target = torch.sin(3.0 * t) + 0.1 * torch.randn(n, dtype=F64)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.body = torch.nn.Sequential(torch.nn.Linear(1, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))

        def forward(self, t, loss):
            y = self.body(t[:, None])[:, 0]
            return loss(y, target, 0.3)

    net = Net().double()
    twin = Net().double()
    twin.load_state_dict(net.state_dict())
    opt = torch.optim.Adam(net.parameters(), lr=0.05)
    first = None
    for step in range(25):
        opt.zero_grad()
        loss = net(t, LOSS)
        loss.backward()
        ref = twin(t, torch_smoothed_residual)
        twin.zero_grad()
        ref.backward()
        torch.testing.assert_close(loss.detach(), ref.detach(), rtol=1e-12, atol=0.0)
        for p, q in zip(net.parameters(), twin.parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-10, atol=1e-14)
        first = loss.item() if first is None else first
        opt.step()
        twin.load_state_dict(net.state_dict())
    assert loss.item() < 0.5 * first


# -- what is refused -----------------------------------------------------------------------------

def test_a_tensor_on_another_device_is_refused():
    x = torch.empty(3, dtype=F64, device="meta")
    with pytest.raises(zyg.TypeMismatch, match=r"(?s)argument 0 is a tensor on the meta device.*\.cpu\(\)"):
        ENERGY(x, 0.5)


def test_wrong_dtypes_and_argnums_are_refused():
    x = _points(4, 9)
    with pytest.raises(zyg.TypeMismatch, match="argument 0 is an integer tensor"):
        ENERGY(torch.arange(4), 0.5)
    with pytest.raises(zyg.TypeMismatch, match="argument 0 is a torch.float16 tensor"):
        SINES(x.half(), x, 2)
    with pytest.raises(zyg.TypeMismatch, match="argument 1 is a float, not a tensor"):
        zyg.torch.function(chain_energy, argnums=(0, 1))(x, 0.5)
    with pytest.raises(ValueError, match="argnums 3 out of range"):
        zyg.torch.function(chain_energy, argnums=3)(x, 0.5)
    with pytest.raises(TypeError, match="argnums must be"):
        zyg.torch.function(chain_energy, argnums="x")
    with pytest.raises(ValueError, match="unknown target"):
        zyg.torch.function(chain_energy, target="gpu")
    # an integer tensor outside argnums is read (no gradient): moments reads indices
    m, _ = MOMENTS(x, torch.tensor([1, 3]))
    torch.testing.assert_close(m, torch.stack([x[1] + x[3], x[1] ** 2 + x[3] ** 2]), rtol=1e-14, atol=0)


def test_double_backward_is_refused_with_a_zyg_error():
    x = _points(5, 10).requires_grad_()
    (g,) = torch.autograd.grad(ENERGY(x, 0.5), x, create_graph=True)
    # the first derivative is right, and usable
    xr = x.detach().clone().requires_grad_()
    torch_chain_energy(xr, 0.5).backward()
    torch.testing.assert_close(g.detach(), xr.grad, rtol=1e-13, atol=1e-15)
    with pytest.raises(zyg.ZygError, match="second derivatives through PyTorch"):
        g.sum().backward()


def test_an_input_changed_before_backward_is_caught():
    x = _points(5, 11).requires_grad_()
    w = (_points(5, 12).abs() + 0.5)
    out = SINES(x, w, 2)
    with torch.no_grad():
        w.add_(1.0)              # the tape reads w's memory
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sum().backward()


def test_import_zyg_imports_neither_torch_nor_jax():
    code = ("import sys, zyg; assert 'torch' not in sys.modules and 'jax' not in sys.modules; "
            "import types; assert isinstance(zyg.torch, types.ModuleType); "
            "assert 'torch' in sys.modules and 'jax' not in sys.modules; print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
    with pytest.raises(AttributeError):
        zyg.no_such_attribute


def test_the_example_in_docs_interop_runs(tmp_path):
    """docs/interop.md's PyTorch example (in a file: zyg reads the functions' source)."""
    text = (Path(__file__).resolve().parents[1] / "docs" / "interop.md").read_text()
    section = text[text.index("## PyTorch"):text.index("## JAX")]
    script = tmp_path / "interop_torch_example.py"
    script.write_text(re.search(r"```python\n(.*?)```", section, re.S).group(1))
    ns = runpy.run_path(str(script))       # its asserts: the loss falls, gradcheck passes
    assert len(ns["losses"]) == 50 and ns["losses"][-1] < 0.2 * ns["losses"][0]
