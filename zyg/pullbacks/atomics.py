"""Atomic addition into array elements, for adjoints that run as parallel loops.

``zyg/tasks/prange.py`` runs the iterations of a ``prange`` loop's adjoint on several
threads.  Where they add into a shared shadow at scattered elements (stencil neighbours,
gathers ``x[idx[i]]``), the emitter writes ``atomic_add(dx, (i, j), g)`` instead of
``dx[i, j] += g`` (``Emitter.atomic_shadows``).  numba has no atomic operation on the
CPU; :func:`_fadd` emits LLVM's ``atomicrmw fadd`` (monotonic: only the sum matters,
not the order of the additions).  On the python target the loop runs serially and the
addition is a plain one.
"""
from __future__ import annotations

from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic


@intrinsic
def _fadd(typingctx, arr, idx, val):
    if not isinstance(arr, types.Array) or arr.dtype not in (types.float64, types.float32) \
            or not isinstance(idx, types.BaseTuple) or len(idx) != arr.ndim \
            or not all(isinstance(t, types.Integer) for t in idx):
        return None
    sig = types.void(arr, idx, val)

    def codegen(context, builder, sig, args):
        aryty, idxty, valty = sig.args
        ary = context.make_array(aryty)(context, builder, args[0])
        inds = [context.cast(builder, v, t, types.intp)
                for v, t in zip(cgutils.unpack_tuple(builder, args[1]), idxty)]
        ptr = cgutils.get_item_pointer(context, builder, aryty, ary, inds, wraparound=True)
        v = context.cast(builder, args[2], valty, aryty.dtype)
        builder.atomic_rmw("fadd", ptr, v, "monotonic")
        return context.get_dummy_value()
    return sig, codegen


@njit(nogil=True, cache=False)
def atomic_add_compiled(a, idx, v):
    """``a[idx] += v`` as one atomic operation (``idx`` a tuple of integers)."""
    _fadd(a, idx, v)


def atomic_add_python(a, idx, v):
    """``a[idx] += v`` (the python target runs parallel loops serially)."""
    a[idx] += v


def atomic_add(backend, ndim: int = 0):
    """What generated code calls for an atomic ``a[idx] += v`` on ``backend`` (``idx`` a
    tuple of ``ndim`` integers; the cuda back end spells it its own way: ``backends/cuda.py``)."""
    own = getattr(backend, "atomic_add", None)
    if own is not None:
        return own(ndim)
    return atomic_add_compiled if backend.compiled else atomic_add_python
