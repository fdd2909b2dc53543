"""``zyg.torch.function(f)``: a function differentiated by zyg as a PyTorch autograd function.

    >>> import numpy as np, torch, zyg
    >>> def energy(x, k):
    ...     e = 0.0
    ...     for i in range(x.shape[0] - 1):
    ...         d = x[i + 1] - x[i]
    ...         e += k * d * d
    ...     return e
    >>> E = zyg.torch.function(energy, argnums=0)
    >>> x = torch.tensor([0.0, 1.0, 3.0], dtype=torch.float64, requires_grad=True)
    >>> E(x, 0.5).backward()
    >>> x.grad
    tensor([-1., -1.,  2.], dtype=torch.float64)

The forward pass hands the tensors to ``zyg.pullback`` as numpy arrays that share their
memory (``t.detach().numpy()``; non-contiguous tensors are made contiguous first) and
returns the results as tensors (``torch.from_numpy``); the backward pass calls the
pullback's ``back`` with the incoming gradients.  Only CPU tensors of float64 and float32
(and integer and bool tensors, which get no gradient) are accepted.  Double backward
(``create_graph=True`` followed by a second ``backward``) raises a :class:`zyg.ZygError`.
See docs/interop.md.
"""
from __future__ import annotations

from typing import Any, Callable, List, Optional, Sequence, Tuple

import numpy as np
import torch

from .. import backends
from ..api import pullback
from ..errors import ZygError
from . import common

__all__ = ["function", "ZygTorchFunction"]

_FLOATS = {torch.float64: np.float64, torch.float32: np.float32}
_READ_ONLY = (torch.int64, torch.int32, torch.bool)      # integer arrays zyg reads
_TORCH_OF = {np.dtype(np.float64): torch.float64, np.dtype(np.float32): torch.float32,
             np.dtype(np.int64): torch.int64, np.dtype(np.int32): torch.int32,
             np.dtype(np.bool_): torch.bool}


class _Out:
    """How one output of ``f`` was turned into a tensor: its numpy dtype, its shape (None
    for a number) and whether it carries a gradient (float outputs do)."""

    __slots__ = ("dtype", "shape", "float")

    def __init__(self, dtype: np.dtype, shape: Optional[Tuple[int, ...]]):
        self.dtype = dtype
        self.shape = shape
        self.float = dtype.kind == "f"


class ZygTorchFunction(common.Wrapped):
    """What :func:`function` returns: call it with tensors (and other arguments) as ``f``."""
    api = "zyg.torch.function"

    # -- arguments ------------------------------------------------------------------------

    def _check(self, args: Sequence[Any]) -> Tuple[int, ...]:
        """Check the tensors among ``args``; the positions that get gradients."""
        nums = common.positions(self.argnums, len(args))
        for i, a in enumerate(args):
            if isinstance(a, torch.Tensor):
                self._check_tensor(i, a, nums is not None and i in nums)
            elif nums is not None and i in nums:
                raise self._error(
                    f"argument {i} is a {type(a).__name__}, not a tensor, but argnums names it; "
                    f"gradients go to tensors only",
                    hint=f"pass torch.tensor(...) as argument {i}, or leave {i} out of argnums")
        if nums is None:
            return tuple(i for i, a in enumerate(args)
                         if isinstance(a, torch.Tensor) and a.dtype in _FLOATS)
        return nums

    def _check_tensor(self, i: int, t: torch.Tensor, wanted: bool) -> None:
        if t.device.type != "cpu":
            raise self._error(
                f"argument {i} is a tensor on the {t.device} device; zyg runs on the CPU and "
                f"reads tensors through numpy",
                hint=f"pass argument {i}.cpu() and move the result back with .to({str(t.device)!r}); "
                     f"zyg's CUDA back end differentiates numba.cuda kernels (docs/cuda.md)")
        if t.layout != torch.strided:
            raise self._error(f"argument {i} is a {t.layout} tensor; zyg reads dense tensors",
                              hint=f"pass argument {i}.to_dense()")
        if t.dtype in _FLOATS:
            return
        if t.dtype in _READ_ONLY:
            if wanted:
                raise self._error(
                    f"argument {i} is an integer tensor ({t.dtype}), and argnums asks for its "
                    f"gradient; zyg differentiates float64 and float32 tensors",
                    hint=f"pass a float tensor (argument {i}.double()), or leave {i} out of "
                         f"argnums: integer tensors are read without a gradient")
            return
        raise self._error(
            f"argument {i} is a {t.dtype} tensor; zyg.torch.function takes float64 and float32 "
            f"tensors (and int64, int32 and bool tensors, without a gradient)",
            hint=f"convert it (argument {i}.double() or .float())")

    def _arrays(self, args: Sequence[Any]) -> List[Any]:
        """The arguments as zyg takes them: tensors as numpy arrays sharing their memory
        (0-d tensors as numbers), copies of the arrays ``f`` writes into."""
        out: List[Any] = []
        for a in args:
            if isinstance(a, torch.Tensor):
                t = a.detach()
                if t.is_conj():
                    t = t.resolve_conj()
                if t.is_neg():
                    t = t.resolve_neg()
                if not t.is_contiguous():
                    t = t.contiguous()
                v = t.numpy()
                out.append(common.scalar_of(v) if v.ndim == 0 else v)
            else:
                out.append(a)
        for i in common.written_arguments(self.f, out, self.target):
            out[i] = common.copy_arrays(out[i])
        return out

    def _scalar_dtype(self, args: Sequence[Any]) -> np.dtype:
        return common.float_result_dtype([np.dtype(_FLOATS[a.dtype]) for a in args
                                          if isinstance(a, torch.Tensor) and a.dtype in _FLOATS])

    # -- results --------------------------------------------------------------------------
    def _outputs(self, y: Any, arrays: Sequence[Any], args: Sequence[Any]
                 ) -> Tuple[List[torch.Tensor], List[_Out], bool]:
        """``f``'s result as tensors, how each was made, and whether it was a tuple."""
        single = not isinstance(y, tuple)
        ys = [y] if single else list(y)
        given = [a for a in arrays if isinstance(a, np.ndarray)]
        outs: List[torch.Tensor] = []
        info: List[_Out] = []
        made: List[np.ndarray] = []
        for k, v in enumerate(ys):
            what = "the result" if single else f"result {k}"
            if isinstance(v, tuple):
                raise self._error(f"{what} is a tuple; zyg.torch.function takes results that "
                                  f"are numbers, arrays or a flat tuple of them")
            if isinstance(v, np.ndarray):
                if v.dtype not in _TORCH_OF:
                    raise self._error(f"{what} is a {v.dtype} array; zyg.torch.function returns "
                                      f"float64, float32, int64, int32 and bool arrays",
                                      hint="return the real and imaginary parts separately"
                                      if v.dtype.kind == "c" else None)
                # a tensor of its own: never the memory of an argument or of another result
                if not v.flags.writeable or not v.dtype.isnative or \
                        any(np.may_share_memory(v, a) for a in given + made):
                    v = v.copy()
                made.append(v)
                outs.append(torch.from_numpy(v))
                info.append(_Out(v.dtype, v.shape))
                continue
            if isinstance(v, (bool, np.bool_)):
                dt = np.dtype(np.bool_)
            elif isinstance(v, (int, np.integer)):
                dt = np.dtype(np.int64)
            elif isinstance(v, (float, np.floating)):
                dt = v.dtype if isinstance(v, np.floating) else self._scalar_dtype(args)
            else:
                raise self._error(f"{what} is a {type(v).__name__}; zyg.torch.function returns "
                                  f"numbers and float arrays")
            outs.append(torch.tensor(v, dtype=_TORCH_OF[dt]))
            info.append(_Out(dt, None))
        return outs, info, single

    # -- calls ----------------------------------------------------------------------------
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if kwargs:
            raise TypeError(f"{self!r} takes positional arguments only")
        nums = self._check(args)
        if torch.is_grad_enabled() and any(isinstance(a, torch.Tensor) and a.requires_grad
                                           for a in args):
            return ZygFunction.apply(self, nums, *args)
        # no gradient can be asked for: the primal only, no graph
        arrays = self._arrays(args)
        y, _ = pullback(self.f, *arrays, target=self.target)
        outs, _, single = self._outputs(y, arrays, args)
        return outs[0] if single else tuple(outs)


class ZygFunction(torch.autograd.Function):
    """The autograd node of one call: forward runs zyg's primal, backward its pullback."""

    @staticmethod
    def forward(ctx, fn: ZygTorchFunction, nums: Tuple[int, ...], *args: Any):
        arrays = fn._arrays(args)
        y, back = pullback(fn.f, *arrays, target=fn.target)
        outs, info, single = fn._outputs(y, arrays, args)
        ctx.fn, ctx.nums, ctx.info, ctx.single = fn, nums, info, single
        needs = ctx.needs_input_grad[2:]
        ctx.back = back if any(needs[i] for i in nums) else None
        ctx.arrays = arrays if ctx.back is not None else None
        ctx.backs = 0
        ctx.tensors = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
        ctx.shapes = {i: (args[i].shape, args[i].dtype) for i in ctx.tensors}
        ctx.nargs = len(args)
        nondiff = [o for o, k in zip(outs, info) if not k.float]
        if nondiff:
            ctx.mark_non_differentiable(*nondiff)
        # PyTorch's version counters: an input or a result changed in place before backward
        # raises PyTorch's error (the tape may refer to their memory)
        ctx.save_for_backward(*[args[i] for i in ctx.tensors], *outs)
        return outs[0] if single else tuple(outs)

    @staticmethod
    def backward(ctx, *gouts: torch.Tensor):
        saved = ctx.saved_tensors        # checks the version counters
        grads: List[Optional[torch.Tensor]] = [None] * ctx.nargs
        if ctx.back is None:
            return (None, None, *grads)
        needs = ctx.needs_input_grad[2:]
        dys = []
        dy_arrays = []
        for g, k in zip(gouts, ctx.info):
            if not k.float or g is None:
                dys.append(None)
            elif k.shape is None:
                dys.append(float(g))
            else:
                d = g.detach()
                if not d.is_contiguous():
                    d = d.contiguous()
                d = d.numpy().astype(k.dtype, copy=False)
                dy_arrays.append(d)
                dys.append(d)
        back = ctx.back
        if ctx.backs:
            # another backward of this graph (retain_graph=True, gradcheck, jacobians): a
            # function that writes into arrays allows one back() per pullback, so the
            # pullback runs again, on the arrays of the forward pass (the version counters
            # checked above: unchanged; the written copies: rewound by the first back)
            _, back = pullback(ctx.fn.f, *ctx.arrays, target=ctx.fn.target)
        ctx.backs += 1
        cots = back(dys[0] if ctx.single else tuple(dys))
        for i in ctx.nums:
            c = cots[i]
            if not needs[i] or c is None:
                continue
            shape, dtype = ctx.shapes[i]
            c = np.asarray(c, dtype=_FLOATS[dtype])
            if any(np.may_share_memory(c, d) for d in dy_arrays) or not c.flags.writeable:
                c = c.copy()        # the gradient is a tensor of its own
            grads[i] = torch.from_numpy(c).reshape(shape)
        if torch.is_grad_enabled():
            grads = _refuse_double_backward(ctx, grads, saved, gouts)
        return (None, None, *grads)


def _refuse_double_backward(ctx, grads, saved, gouts) -> List[Optional[torch.Tensor]]:
    """With ``create_graph=True``: the gradients as results of a node whose backward raises
    (zyg computed them in numpy, so PyTorch cannot differentiate them again)."""
    leaves = [t for t in list(saved) + list(gouts)
              if isinstance(t, torch.Tensor) and t.requires_grad]
    have = [i for i, g in enumerate(grads) if g is not None]
    if not leaves or not have:
        return grads
    wrapped = _NoDoubleBackward.apply(ctx.fn.__name__, len(have), *[grads[i] for i in have], *leaves)
    out = list(grads)
    for i, g in zip(have, wrapped):
        out[i] = g
    return out


class _NoDoubleBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name: str, n: int, *ts: torch.Tensor):
        ctx.name = name
        return tuple(t.view_as(t) for t in ts[:n])

    @staticmethod
    def backward(ctx, *_):
        raise ZygError(
            f"zyg.torch.function({ctx.name}): second derivatives through PyTorch (backward of a "
            f"gradient made with create_graph=True) are not supported; zyg computes the "
            f"gradient in numpy, outside PyTorch's graph. Use zyg.hessian or zyg.hvp on the "
            f"function itself for second derivatives")


def function(f: Callable, argnums: common.Argnums = None, *, target: str = "cpu") -> ZygTorchFunction:
    """``f`` as a PyTorch function: called with tensors, it runs zyg's compiled primal of
    ``f`` on their memory, and ``backward`` runs zyg's pullback.

    ``argnums`` (None: every float tensor argument; or an int or a tuple of ints) selects
    the arguments that get gradients; the others get none (``None``, as constants).
    Arguments that are not tensors (numbers, numpy arrays, tuples) are passed to ``f``
    unchanged.  ``target``: ``"cpu"`` (compiled with numba) or ``"python"``.
    See docs/interop.md.
    """
    if not callable(f):
        raise TypeError(f"zyg.torch.function takes a function, not {type(f).__name__}")
    backends.host(target, "zyg.torch.function")
    return ZygTorchFunction(f, common.check_argnums(argnums, "zyg.torch.function"), target)
