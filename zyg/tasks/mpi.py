"""Differentiating programs that communicate with MPI through numba-mpi (issue 26).

Every rank calls the gradient; each rank receives the derivative of the sum over ranks of
the ranks' outputs with respect to its own inputs (Enzyme's semantics).  The calls are
reversed as in ``../shared/CUDA_AND_TASKS.md`` section 5:

============================  =====================================================
primal                        adjoint
============================  =====================================================
``allreduce(x, r)`` (SUM)     ``dx += allreduce_SUM(dr)``; ``dr`` zeroed
``bcast(x, root)``            ``dx_root += reduce_SUM(dx)``; the other ranks' ``dx`` zeroed
``reduce(x, r, SUM, root)``   ``dx += bcast(dr_root)``; ``dr`` zeroed on the root
``send(x, dest, tag)``        receive from ``dest`` into a temporary, add it into ``dx``
``recv(x, source, tag)``      send ``dx`` to ``source``, zero ``dx``; ``x`` rewound
``sendrecv(s, d, r, src)``    ``sendrecv(dr -> src, tmp <- d)``, ``ds += tmp``
``isend(x, dest, tag)``       at the adjoint of its wait: ``irecv`` of a temporary from
                              ``dest``; at the adjoint of the isend: wait, ``dx += tmp``
``irecv(x, source, tag)``     at the adjoint of its wait: ``isend`` of a copy of ``dx``
                              to ``source``, ``dx`` zeroed, ``x`` rewound; at the
                              adjoint of the irecv: wait
``wait(r)``, ``waitall(rs)``  where the reverse messages start (above)
============================  =====================================================

How: the front end (:func:`_lower_mpi`, a hook of ``zyg/ssa/hooks.CALL_LOWERINGS``) turns
each call into a write of a value computed by a functional primitive of this module,
``r[...] = allreduce_sum(x)``, so that the rewinding of ``r`` is the ordinary rewinding of a
write.  The primitives *communicate* (``_zyg_comm``): activity analysis treats their
results as varied and their operands as useful, and the adjoint runs their reverse
communication whether or not the values are active (with a zero cotangent where nothing
is), so that the ranks' adjoint messages stay matched (``pullbacks/arrays.prepare_comm``).

Point-to-point messages of the adjoint travel between the same pairs of ranks as the
primal's, in the reverse order, with the primal message's tag: the reverse of a send
receives with the send's tag, the reverse of a receive sends with the receive's tag, or
with tag 0 where the receive took any tag (numba-mpi drops the status that would name it;
MPI keeps the order of one pair's messages, so the reverse matches them in order).  A
receive with any tag of a message sent with a tag other than 0 therefore has no matching
reverse: give such receives the sender's tag.
Non-blocking calls are "reversed at their wait" (``pullbacks/comm.py``).  The front end
links each wait to the start that made its request (:func:`_lower_wait`: the request is
the name the start's tuple was unpacked into, or a tuple of such names for ``waitall``):
``status, req = isend(x, dest, tag)`` becomes ``h = isend_start(x, dest, tag)``, a handle
(an int64 array holding the MPI request and a copy of ``x``, read at the start), and its
wait ``isend_wait(h, x, dest, tag)``; ``irecv(buf, source, tag)`` becomes ``h =
irecv_start(buf, source, tag)`` (the message lands in the handle's memory) and its wait
the write ``buf[...] = irecv_wait(h, buf, source, tag)``, rewound like any write.  The
waits of a ``waitall`` run in the order their requests started.  The reverse of a
non-blocking call is the non-blocking call of the other direction: the adjoint of the wait
starts it and keeps its handle in a variable of the adjoint code, and the adjoint of the
start completes it, so that an exchange written ``irecv; isend; waitall`` reverses without
a blocking call that could deadlock.  ``pullbacks/comm.check_links`` refuses, at the
user's line, requests it cannot link (from a branch join, carried across iterations,
stored, never waited or waited twice, a path that leaves before the wait) and sends (or
receives) completed out of their start order, whose reverse messages MPI could pair
differently.  Forward mode sends a tangent right after its value under the same handle
(``isend_start2`` ...).

Not supported yet (a ``zyg.UnsupportedSyntax`` at the call): ``MIN``/``MAX`` reductions,
receives from ``ANY_SOURCE``, ``test``/``testall``/``testany``/``waitany``,
``scatter``/``gather``/``allgather``.  Forward mode (``jvp``) sends the tangents as the
primal sent the values, and forward over the reverse code (``hvp``, ``hessian``) does the
same with the reverse code's messages.
"""
from __future__ import annotations

import inspect
from typing import Any, Callable, Dict, Optional

import numpy as np

from ..ssa import analysis, hooks
from ..ssa.analysis import array_kind, is_array

# numba-mpi (an optional dependency: pip install "zyg[mpi]") is imported when differentiated
# code first calls it (importing it starts MPI): see _ensure
_mpi: Any = None
_Op: Any = None
ANY_SOURCE = -2     # MPI's "any source" and "any tag" (mpi4py's values, set by _ensure)
ANY_TAG = -1


def _ensure() -> None:
    global _mpi, _Op, ANY_SOURCE, ANY_TAG
    if _mpi is None:
        import numba_mpi
        from mpi4py import MPI
        _mpi, _Op = numba_mpi, numba_mpi.Operator
        ANY_SOURCE, ANY_TAG = int(MPI.ANY_SOURCE), int(MPI.ANY_TAG)
        for name, k in (("rank", "int"), ("size", "int"), ("barrier", "int"), ("wtime", "float"),
                        ("initialized", "bool"), ("query_thread", "int")):
            f = getattr(numba_mpi, name, None)
            if f is not None:       # called as they are: their kinds without running them
                analysis.KIND_HOOKS[getattr(f, "py_func", f)] = (lambda k: lambda kinds, consts: k)(k)


# -- the primitives (run by the python target; numba compiles them on cpu) -------------------

def allreduce_sum(x):
    """The elementwise sum of ``x`` over the ranks (a number becomes a 1-element array)."""
    a = np.atleast_1d(np.asarray(x))
    out = np.empty_like(a)
    _mpi.allreduce(a, out, _Op.SUM)
    return out


def bcast_from(x, root):
    """``x`` of rank ``root``, on every rank."""
    out = np.ascontiguousarray(x).copy()
    _mpi.bcast(out, root)
    return out


def reduce_sum(x, old, root):
    """On rank ``root``: the elementwise sum of ``x`` over the ranks; elsewhere ``old``."""
    a = np.atleast_1d(np.asarray(x))
    out = np.ascontiguousarray(old).copy()
    _mpi.reduce(a, out, _Op.SUM, root)
    return out


def send_to(x, dest, tag):
    """Send ``x`` to rank ``dest``; the MPI status (0)."""
    return _mpi.send(np.ascontiguousarray(x), dest, tag)


def recv_from(like, source, tag):
    """An array like ``like`` received from rank ``source``."""
    if source < 0:
        raise ValueError("zyg: a receive from any source cannot be differentiated; pass the rank")
    out = np.empty_like(np.ascontiguousarray(like))
    _mpi.recv(out, source, tag)
    return out


def sendrecv_(x, dest, like, source, sendtag, recvtag):
    """Send ``x`` to ``dest`` while receiving an array like ``like`` from ``source``."""
    if source < 0:
        raise ValueError("zyg: a receive from any source cannot be differentiated; pass the rank")
    out = np.empty_like(np.ascontiguousarray(like))
    _mpi.sendrecv(np.ascontiguousarray(x), dest, out, source, sendtag, recvtag)
    return out


# -- non-blocking calls: a request is a handle, an int64 array ----------------------------------
#
# ``[req0, req1, 0, 0 | data block 0 | data block 1]``: the MPI requests (one, or two in forward
# mode: the value's and the tangent's message), then the message's data, which the handle
# keeps alive until the wait (a send's copy of its array, a receive's landing buffer).  Its
# kind, ``i8[1]``, is not differentiable: a request is never active.  (The functions call no
# helper of their own: code calling numba-mpi is compiled without its plain callees.)

_HEAD = 4       # int64 words before the data


def isend_start(x, dest, tag):
    """``numba_mpi.isend(x, dest, tag)``: a copy of ``x``, sent from the handle's memory."""
    a = np.ascontiguousarray(x)
    nw = (a.size * a.itemsize + 7) // 8
    h = np.zeros(_HEAD + nw, np.int64)
    b = h[_HEAD:_HEAD + nw].view(a.dtype)[:a.size]
    b[:] = a.reshape(a.size)
    st, req = _mpi.isend(b, dest, tag)
    h[0] = req[0]
    return h


def irecv_start(like, source, tag):
    """``numba_mpi.irecv`` of an array like ``like``, into the handle's memory (the user's
    buffer is written at the wait: ``irecv_wait``)."""
    if source < 0:
        raise ValueError("zyg: a receive from any source cannot be differentiated; pass the rank")
    a = np.ascontiguousarray(like)
    nw = (a.size * a.itemsize + 7) // 8
    h = np.zeros(_HEAD + nw, np.int64)
    st, req = _mpi.irecv(h[_HEAD:_HEAD + nw].view(a.dtype)[:a.size], source, tag)
    h[0] = req[0]
    return h


def isend_wait(h, x, dest, tag):
    """The wait of an ``isend_start`` (``x``, ``dest``, ``tag``: its operands, which the
    reverse reads); MPI's status."""
    r = np.empty(1, _mpi.RequestType)
    r[0] = h[0]
    return _mpi.wait(r)


def irecv_wait(h, like, source, tag):
    """The wait of an ``irecv_start``: the received array, shaped like ``like``."""
    r = np.empty(1, _mpi.RequestType)
    r[0] = h[0]
    _mpi.wait(r)
    a = np.ascontiguousarray(like)
    nw = (a.size * a.itemsize + 7) // 8
    return h[_HEAD:_HEAD + nw].view(a.dtype)[:a.size].reshape(a.shape).copy()


# forward mode: the tangent travels as a second message right after the value's (as a
# blocking call's tangent does), both requests in one handle

def isend_start2(x, tx, dest, tag):
    a = np.ascontiguousarray(x)
    nw = (a.size * a.itemsize + 7) // 8
    h = np.zeros(_HEAD + 2 * nw, np.int64)
    b = h[_HEAD:_HEAD + nw].view(a.dtype)[:a.size]
    b[:] = a.reshape(a.size)
    st, req = _mpi.isend(b, dest, tag)
    h[0] = req[0]
    b1 = h[_HEAD + nw:_HEAD + 2 * nw].view(a.dtype)[:a.size]
    b1[:] = np.ascontiguousarray(tx).reshape(a.size)
    st, req = _mpi.isend(b1, dest, tag)
    h[1] = req[0]
    return h


def irecv_start2(like, source, tag):
    if source < 0:
        raise ValueError("zyg: a receive from any source cannot be differentiated; pass the rank")
    a = np.ascontiguousarray(like)
    nw = (a.size * a.itemsize + 7) // 8
    h = np.zeros(_HEAD + 2 * nw, np.int64)
    st, req = _mpi.irecv(h[_HEAD:_HEAD + nw].view(a.dtype)[:a.size], source, tag)
    h[0] = req[0]
    st, req = _mpi.irecv(h[_HEAD + nw:_HEAD + 2 * nw].view(a.dtype)[:a.size], source, tag)
    h[1] = req[0]
    return h


def isend_wait2(h):
    r = np.empty(2, _mpi.RequestType)
    r[0] = h[0]
    r[1] = h[1]
    return _mpi.waitall(r)


def irecv_wait2(h, like):
    r = np.empty(2, _mpi.RequestType)
    r[0] = h[0]
    r[1] = h[1]
    _mpi.waitall(r)
    a = np.ascontiguousarray(like)
    nw = (a.size * a.itemsize + 7) // 8
    return h[_HEAD:_HEAD + nw].view(a.dtype)[:a.size].reshape(a.shape).copy()


def irecv_tangent2(h, like):
    """The tangent received by ``irecv_wait2`` (which waited for it)."""
    a = np.ascontiguousarray(like)
    nw = (a.size * a.itemsize + 7) // 8
    return h[_HEAD + nw:_HEAD + 2 * nw].view(a.dtype)[:a.size].reshape(a.shape).copy()


# -- their adjoints ----------------------------------------------------------------------------

def bcast_back(dy, root):
    """Cotangent of ``bcast_from``'s operand: the sum of the ranks' ``dy`` on the root, zero
    elsewhere."""
    d = np.ascontiguousarray(dy)
    out = np.zeros_like(d)
    _mpi.reduce(d, out, _Op.SUM, root)
    if _mpi.rank() != root:
        out[...] = 0.0
    return out


def reduce_back(dy, root):
    """Cotangent of ``reduce_sum``'s first operand: the root's ``dy``, on every rank."""
    out = np.ascontiguousarray(dy).copy()
    _mpi.bcast(out, root)
    return out


def reduce_keep(dy, root):
    """Cotangent of ``reduce_sum``'s second operand (kept where the rank is not the root)."""
    if _mpi.rank() == root:
        return np.zeros_like(dy)
    return dy.copy()


def send_back(like, dest, tag):
    """Cotangent of ``send_to``'s array: received from ``dest`` with the send's tag (sent by
    the reverse of the matching receive)."""
    out = np.empty_like(np.ascontiguousarray(like))
    _mpi.recv(out, dest, tag)
    return out


def recv_back(dy, source, tag):
    """The reverse of a receive: send its cotangent back to ``source``."""
    t = 0 if tag < 0 else tag
    return _mpi.send(np.ascontiguousarray(dy), source, t)


def sendrecv_back(dy, source, like, dest, sendtag, recvtag):
    """The reverse of ``sendrecv_``: ``dy`` goes back to ``source`` while the cotangent of the
    sent array comes back from ``dest`` (with the primal send's tag)."""
    out = np.empty_like(np.ascontiguousarray(like))
    t = 0 if recvtag < 0 else recvtag
    _mpi.sendrecv(np.ascontiguousarray(dy), source, out, dest, t, sendtag)
    return out


# -- what the emitter needs to know --------------------------------------------------------------

class CommRule:
    """The reverse of a communicating primitive (``pullbacks/arrays.prepare_comm``).

    ``back(x, dy, ref)`` -> the source of the reverse communication (always run), given the
    sources of the operands ``x`` and of the result's cotangent ``dy`` (``ref(name)`` names
    a helper); its value is the contribution to operand ``main`` (None: a status, no
    contribution).  ``local[i](x, dy)``: a contribution to operand ``i`` without
    communication.  ``like``: the operand whose shape and dtype the result has (its
    cotangent is zero where the result is inactive); None where the result is a status.

    Non-blocking calls (``pullbacks/comm.py``): ``link`` is ``("start", d)`` or
    ``("wait", d, k)`` (``d``: ``"s"`` or ``"r"``; ``k``: the operand holding the request),
    and ``back`` takes a fourth argument, the adjoint's variable holding the reverse
    message's request: the wait's ``back`` starts that message (its value is the request),
    the start's ``back`` completes it.  ``dirs``: the directions a blocking call completes
    (``"s"``, ``"r"``), checked against pending non-blocking ones."""

    def __init__(self, back: Callable, main: Optional[int], like: Optional[int],
                 local: Optional[Dict[int, Callable]] = None, link: Optional[tuple] = None,
                 dirs: tuple = ()):
        self.back = back
        self.main = main
        self.like = like
        self.local = local or {}
        self.link = link
        self.dirs = dirs
        self.helpers = HELPERS


def _kind_like(i: int):
    def kind(kinds):
        k = kinds[i]
        if is_array(k):
            return k
        return array_kind({"float": "float64", "int": "int64", "bool": "bool",
                           "complex": "complex128"}.get(k, "float64"), 1)
    return kind


#: the helpers the reverse code calls, by name (filled below)
HELPERS: Dict[str, Callable] = {}


def _declare(fn, rule: Optional[CommRule], kind, linear: tuple) -> None:
    """``fn`` communicates: ``rule`` reverses it (None for the helpers of reverse code, which
    are only differentiated in forward mode), ``kind(kinds)`` is its result's kind (never
    found by running it, which would communicate), and it is linear in the operands at
    ``linear``: its tangent is ``fn`` applied to their tangents (forward mode, and forward
    over the reverse code for Hessian-vector products).  Activity treats every such
    function's result as varied and its operands as useful (``ssa/analysis.activity``)."""
    if rule is not None:
        fn._zyg_comm = rule
    fn._zyg_kind = kind
    fn._zyg_linear = linear
    # numba-mpi's calls hold ctypes pointers of this process's MPI library: code calling them
    # is compiled in every process, never loaded from numba's disk cache
    fn._zyg_uncacheable = True


_declare(allreduce_sum, CommRule(lambda x, dy, r: f"{r('allreduce_sum')}({dy})", 0, 0),
         _kind_like(0), (0,))
_declare(bcast_from, CommRule(lambda x, dy, r: f"{r('bcast_back')}({dy}, {x[1]})", 0, 0),
         _kind_like(0), (0,))
_declare(reduce_sum, CommRule(lambda x, dy, r: f"{r('reduce_back')}({dy}, {x[2]})", 0, 1,
                              {1: lambda x, dy, r: f"{r('reduce_keep')}({dy}, {x[2]})"}),
         _kind_like(1), (0, 1))
_declare(send_to, CommRule(lambda x, dy, r: f"{r('send_back')}({x[0]}, {x[1]}, {x[2]})", 0, None,
                           dirs=("s",)), lambda kinds: "int", (0,))
_declare(recv_from, CommRule(lambda x, dy, r: f"{r('recv_back')}({dy}, {x[1]}, {x[2]})", None, 0,
                             dirs=("r",)), _kind_like(0), ())
_declare(sendrecv_, CommRule(lambda x, dy, r: f"{r('sendrecv_back')}({dy}, {x[3]}, {x[0]}, {x[1]}, "
                                             f"{x[4]}, {x[5]})", 0, 2, dirs=("s", "r")),
         _kind_like(2), (0,))
# non-blocking calls: the reverse of a non-blocking call is the non-blocking call of the
# other direction, started at the adjoint of the wait (into the variable z) and completed at
# the adjoint of the start
_HANDLE = "i8[1]"
_declare(isend_start, CommRule(lambda x, dy, r, z: f"{r('irecv_wait')}({z}, {x[0]}, {x[1]}, {x[2]})",
                               0, None, link=("start", "s")), lambda kinds: _HANDLE, (0,))
_declare(irecv_start, CommRule(lambda x, dy, r, z: f"{r('isend_wait')}({z}, None, 0, 0)",
                               None, None, link=("start", "r")), lambda kinds: _HANDLE, ())
_declare(isend_wait, CommRule(lambda x, dy, r, z: f"{r('irecv_start')}({x[1]}, {x[2]}, {x[3]})",
                              None, None, link=("wait", "s", 0)), lambda kinds: "int", ())
_declare(irecv_wait, CommRule(lambda x, dy, r, z: f"{r('isend_start')}({dy}, {x[2]}, max({x[3]}, 0))",
                              None, 1, link=("wait", "r", 0)), _kind_like(1), (0,))
for _f, _k in ((isend_start2, lambda kinds: _HANDLE), (irecv_start2, lambda kinds: _HANDLE),
               (isend_wait2, lambda kinds: "int"), (irecv_wait2, _kind_like(1)),
               (irecv_tangent2, _kind_like(1))):
    _declare(_f, None, _k, ())      # forward-mode code only
# forward mode (pullbacks/forward.py): (value, tangent) sources from the operands' sources
# ``a`` and their tangents ``t``
isend_start._zyg_forward = lambda a, t, r: (f"{r('isend_start2')}({a[0]}, {t[0]}, {a[1]}, {a[2]})", None)
irecv_start._zyg_forward = lambda a, t, r: (f"{r('irecv_start2')}({a[0]}, {a[1]}, {a[2]})", None)
isend_wait._zyg_forward = lambda a, t, r: (f"{r('isend_wait2')}({a[0]})", None)
irecv_wait._zyg_forward = lambda a, t, r: (f"{r('irecv_wait2')}({a[0]}, {a[1]})",
                                           f"{r('irecv_tangent2')}({a[0]}, {a[1]})")
# the reverse code's helpers: linear in the cotangent they move
_declare(bcast_back, None, _kind_like(0), (0,))
_declare(reduce_back, None, _kind_like(0), (0,))
_declare(reduce_keep, None, _kind_like(0), (0,))
_declare(send_back, None, _kind_like(0), ())
_declare(recv_back, None, lambda kinds: "int", (0,))
_declare(sendrecv_back, None, _kind_like(2), (0,))

HELPERS.update({f.__name__: f for f in (allreduce_sum, bcast_back, reduce_back, reduce_keep,
                                         send_back, recv_back, sendrecv_back, isend_start,
                                         irecv_start, isend_wait, irecv_wait, isend_start2,
                                         irecv_start2, isend_wait2, irecv_wait2, irecv_tangent2)})
for _f in (isend_start, irecv_start, isend_wait, irecv_wait):
    _f._zyg_helpers = HELPERS


# -- the front end's hook ------------------------------------------------------------------------

_PASS_THROUGH = ("rank", "size", "barrier", "wtime", "initialized", "query_thread")
_WRITES = {"allreduce": "recvobj", "bcast": "data", "reduce": "recvobj", "recv": "data",
           "sendrecv": "recvdata"}


def _mpi_name(fn) -> Optional[str]:
    """The name of a numba-mpi function (None for anything else)."""
    mod = getattr(getattr(fn, "py_func", fn), "__module__", None)
    if not isinstance(mod, str) or not mod.startswith("numba_mpi"):
        return None
    _ensure()
    for name in ("allreduce", "bcast", "reduce", "send", "recv", "sendrecv", "isend", "irecv",
                 "wait", "waitall", "waitany", "test", "testall", "testany", "scatter",
                 "gather", "allgather") + _PASS_THROUGH:
        if getattr(_mpi, name, None) is fn and fn is not None:
            return name
    return "?"      # another function of numba-mpi: refused (running it to find its kind
                    # would communicate)


def _bind(low, fn, name: str, node) -> Dict[str, Any]:
    py = getattr(fn, "py_func", fn)
    try:
        bound = inspect.signature(py).bind(*node.args, **{k.arg: k.value for k in node.keywords})
    except TypeError as e:
        raise low.unsupported(node, f"numba_mpi.{name}(): {e}")
    if any(k.arg is None for k in node.keywords):
        raise low.unsupported(node, f"numba_mpi.{name}(): pass the arguments by name or position")
    return dict(bound.arguments)


def _known(low, node) -> Any:
    """The value of a constant operand (a literal, a global, ``Operator.SUM``), else None."""
    import gast
    if isinstance(node, gast.Constant):
        return node.value
    if isinstance(node, gast.UnaryOp) and isinstance(node.op, gast.USub) and \
            isinstance(node.operand, gast.Constant):
        return -node.operand.value
    if isinstance(node, (gast.Name, gast.Attribute)):
        return low.static_value(node)
    return None


#: mpi4py's buffer methods of COMM_WORLD -> (numba-mpi's function, its parameter names in
#: mpi4py's order); the same primitives reverse them
_MPI4PY = {
    "Allreduce": ("allreduce", ("sendobj", "recvobj", "operator")),
    "Bcast": ("bcast", ("data", "root")),
    "Reduce": ("reduce", ("sendobj", "recvobj", "operator", "root")),
    "Send": ("send", ("data", "dest", "tag")),
    "Recv": ("recv", ("data", "source", "tag", "status")),
    "Sendrecv": ("sendrecv", ("senddata", "dest", "sendtag", "recvdata", "source", "recvtag",
                              "status")),
    "Get_rank": ("rank", ()), "Get_size": ("size", ()), "Barrier": ("barrier", ()),
}


def _mpi4py_call(low, fn, node):
    """``MPI.COMM_WORLD.Allreduce(x, r, op=MPI.SUM)`` and the others: (numba-mpi's name of
    the call, its arguments by numba-mpi's parameter names), or None for anything else."""
    comm = getattr(fn, "__self__", None)
    if comm is None or not (type(comm).__module__ or "").startswith("mpi4py"):
        return None
    what = f"comm.{getattr(fn, '__name__', '?')}()"
    try:
        from mpi4py import MPI
        is_comm = isinstance(comm, MPI.Comm)
    except ImportError:
        return None
    if not is_comm:
        return None
    if getattr(fn, "__name__", None) not in _MPI4PY:
        raise low.unsupported(node, f"mpi4py's {what} is not supported in differentiated code",
                              "the buffer calls Allreduce, Bcast, Reduce, Send, Recv, Sendrecv, "
                              "Barrier, Get_rank and Get_size are (docs/parallel.md)")
    if comm != MPI.COMM_WORLD:
        raise low.unsupported(node, f"{what} on a communicator other than MPI.COMM_WORLD is not "
                                    "supported in differentiated code")
    try:
        _ensure()
    except ImportError as e:
        raise low.unsupported(node, f"differentiating {what} needs numba-mpi ({e})",
                              "pip install 'zyg[mpi]'") from None
    name, params = _MPI4PY[fn.__name__]
    if len(node.args) > len(params):
        raise low.unsupported(node, f"{what} takes at most {len(params)} arguments")
    got = dict(zip(params, node.args))
    for k in node.keywords:
        key = {"sendbuf": "sendobj" if name != "sendrecv" else "senddata",
               "recvbuf": "recvobj" if name != "sendrecv" else "recvdata",
               "buf": "data", "op": "operator"}.get(k.arg, k.arg)
        if k.arg is None or key not in params or key in got:
            raise low.unsupported(node, f"{what}: unexpected argument {k.arg!r}")
        got[key] = k.value
    status = got.pop("status", None)
    if status is not None and low.static_value(status) is not None:
        raise low.unsupported(node, f"{what}: a status object is not supported (zyg needs the "
                                    "source and tag up front)")
    import gast
    for k, v in got.items():
        if isinstance(v, (gast.List, gast.Tuple)):
            raise low.unsupported(node, f"{what}: pass the array itself, not [buffer, datatype]")
    op = got.get("operator")
    if op is not None:
        if _known(low, op) != MPI.SUM:
            raise low.unsupported(node, f"{what} with an operator other than MPI.SUM is not "
                                        "differentiated yet")
        del got["operator"]
    return name, got


def _lower_mpi(low, fn, node, hint: str):
    """``numba_mpi.allreduce(x, r)`` and the others, and mpi4py's buffer calls of
    ``MPI.COMM_WORLD``: a write of a communicating primitive's value (this module's
    docstring)."""
    name = _mpi_name(fn)
    got = None
    if name is None:
        m = _mpi4py_call(low, fn, node)
        if m is None:
            return None
        name, got = m
        if name in _PASS_THROUGH:
            # numba-mpi's own call (compiled code cannot call mpi4py)
            return low.emit(getattr(_mpi, name), [], node, hint)
    from ..ssa.desugar import _write_out
    from ..ssa.ir import Const
    if name in _PASS_THROUGH:
        return None         # called as it is: a library function (no gradient)
    if name == "?":
        what = getattr(getattr(fn, "py_func", fn), "__name__", "this function")
        raise low.unsupported(node, f"numba_mpi.{what}() is not supported in differentiated code",
                              "docs/parallel.md lists the numba-mpi calls zyg reverses")
    if name in ("waitany", "test", "testall", "testany"):
        raise low.unsupported(node, f"numba_mpi.{name}() is not supported in differentiated code",
                              "complete requests with wait(req) or waitall((r1, r2, ...)) "
                              "(docs/parallel.md)")
    if name in ("scatter", "gather", "allgather"):
        raise low.unsupported(node, f"numba_mpi.{name}() is not supported in differentiated code yet",
                              "use the point-to-point calls and the collectives allreduce, bcast, "
                              "reduce (docs/parallel.md)")
    if got is None:
        got = _bind(low, fn, name, node)
    if name in ("isend", "irecv"):
        return _lower_start(low, name, got, node, hint)
    if name in ("wait", "waitall"):
        return _lower_wait(low, name, got, node)
    if name in ("allreduce", "reduce"):
        opn = got.get("operator")
        op = _Op.SUM if opn is None else _known(low, opn)
        if op is None:
            raise low.unsupported(opn, f"numba_mpi.{name}(): the operator must be a constant "
                                       "(numba_mpi.Operator.SUM)")
        if int(op) != int(_Op.SUM):
            raise low.unsupported(node, f"numba_mpi.{name}() with operator MIN or MAX is not "
                                        "differentiated yet (only SUM)",
                                  "reduce with SUM, or wrap the result in zyg.stop_gradient")
    if name in ("recv", "sendrecv"):
        src = got.get("source")
        if src is None or _known(low, src) == ANY_SOURCE:
            raise low.unsupported(node, f"numba_mpi.{name}() from any source cannot be reversed "
                                        "(numba-mpi drops the status that names the sender)",
                                  "pass source= explicitly")

    def ex(key, default=None):
        v = got.get(key)
        return low.expr(v) if v is not None else Const(default)

    what = f"numba_mpi.{name}()"
    if name == "allreduce":
        value = low.emit(allreduce_sum, [ex("sendobj")], node, hint)
    elif name == "bcast":
        value = low.emit(bcast_from, [ex("data"), ex("root")], node, hint)
    elif name == "reduce":
        value = low.emit(reduce_sum, [ex("sendobj"), ex("recvobj"), ex("root")], node, hint)
    elif name == "send":
        low.emit(send_to, [ex("data"), ex("dest"), ex("tag", 0)], node, hint)
        return Const(0)
    elif name == "recv":
        value = low.emit(recv_from, [ex("data"), ex("source"), ex("tag", ANY_TAG)], node, hint)
    else:   # sendrecv
        value = low.emit(sendrecv_, [ex("senddata"), ex("dest"), ex("recvdata"), ex("source"),
                                     ex("sendtag", 0), ex("recvtag", ANY_TAG)], node, hint)
    _write_out(low, node, got[_WRITES[name]], value, what, "unsafe", True)
    return Const(0)         # MPI_SUCCESS: numba-mpi's status


hooks.CALL_LOWERINGS.insert(0, _lower_mpi)


# -- non-blocking calls in the front end -----------------------------------------------------------

class _Request:
    """A non-blocking call the front end lowered: the handle ``h`` its start returned, the
    tuple ``t`` ``(status, request)`` the user's code sees, the start's operands."""

    def __init__(self, name: str, h, t, ops: list, seq: int, line: int):
        self.name, self.h, self.t, self.ops, self.seq, self.line = name, h, t, ops, seq, line
        self.waited: Optional[int] = None


def _requests(low) -> Dict[int, _Request]:
    got = low.__dict__.get("_zyg_mpi_requests")
    if got is None:
        got = low._zyg_mpi_requests = {}
    return got


def _lower_start(low, name: str, got: Dict[str, Any], node, hint: str):
    """``status, req = numba_mpi.isend(x, dest, tag)`` / ``irecv(buf, source, tag)``: the
    start of the message, ``h = isend_start(x, dest, tag)``, whose value is a handle that
    the wait completes; the call's value is the tuple ``(0, h)``."""
    from ..ssa.ir import Const
    from ..ssa.prims import MakeTuple

    def ex(key, default=None):
        v = got.get(key)
        return low.expr(v) if v is not None else Const(default)
    if name == "isend":
        ops = [ex("data"), ex("dest"), ex("tag", 0)]
        h = low.emit(isend_start, ops, node, "req")
    else:
        src = got.get("source")
        if src is None or _known(low, src) == ANY_SOURCE:
            raise low.unsupported(node, "numba_mpi.irecv() from any source cannot be reversed "
                                        "(numba-mpi drops the status that names the sender)",
                                  "pass source= explicitly")
        ops = [ex("data"), ex("source"), ex("tag", ANY_TAG)]
        h = low.emit(irecv_start, ops, node, "req")
    t = low.emit(MakeTuple(), [Const(0), h], node, hint)
    reqs = _requests(low)
    rq = _Request(name, h, t, ops, len(reqs), low.src.loc(node).lineno)
    reqs[h.id] = reqs[t.id] = rq
    return t


def _resolved(low, v, seen=None):
    """``v`` through the front end's block parameters that take one value on every edge."""
    from ..ssa.ir import Var
    seen = seen or set()
    while isinstance(v, Var) and v.id in low.param_block and v.id not in seen:
        seen.add(v.id)
        if low.param_block[v.id] not in low.sealed:
            return v
        ins = {id(a): a for a in (_resolved(low, a, seen) for a in low.incoming.get(v.id, []))
               if a is not v}
        if len(ins) != 1:
            return v
        v = next(iter(ins.values()))
    return v


def _definition(low, v):
    for blk in low.blocks.values():
        for st in blk.stmts:
            if st.var is v:
                return st
    return None


def _request_of(low, v, node, what: str) -> list:
    """The non-blocking calls whose requests the operand ``v`` holds (a request, or a tuple of
    them); ``UnsupportedSyntax`` where the front end cannot tell."""
    from ..ssa.ir import Const, Var
    from ..ssa.prims import GetItem, MakeTuple
    reqs = _requests(low)
    v = _resolved(low, v)
    if isinstance(v, Var):
        rq = reqs.get(v.id)
        if rq is not None and rq.h is v:
            return [rq]
        st = _definition(low, v)
        if st is not None and isinstance(st.expr.fn, GetItem) and tuple(st.expr.fn.spec) == ("i",) \
                and isinstance(st.expr.args[1], Const) and st.expr.args[1].value == 1:
            t = _resolved(low, st.expr.args[0])
            rq = reqs.get(t.id) if isinstance(t, Var) else None
            if rq is not None and rq.t is t:
                return [rq]
        if st is not None and isinstance(st.expr.fn, MakeTuple) and st.expr.fn.cls is None \
                and v.id not in reqs:
            out = []
            for a in st.expr.args:
                out += _request_of(low, a, node, what)
            return out
    raise low.unsupported(node, f"numba_mpi.{what}(): zyg cannot tell which isend or irecv "
                                "started this request",
                          "wait for a request made in the same block of code, by its name: "
                          "status, req = mpi.irecv(buf, source, tag) ... mpi.wait(req), or "
                          "mpi.waitall((req1, req2))")


def _lower_wait(low, name: str, got: Dict[str, Any], node):
    """``numba_mpi.wait(req)`` / ``waitall((r1, r2))``: the wait of each request, in the
    order they were started; a receive's buffer is written here, ``buf[...] =
    irecv_wait(h, buf, source, tag)`` (rewound as any write)."""
    import gast
    from ..ssa.ir import Call, Const, Stmt
    from ..ssa.prims import SetItem
    arg = got.get("request" if name == "wait" else "requests")
    if arg is None:
        raise low.unsupported(node, f"numba_mpi.{name}() needs its request")
    if name == "waitall" and isinstance(arg, (gast.Tuple, gast.List)):
        found = []
        for e in arg.elts:
            found += _request_of(low, low.expr(e), node, name)
    else:
        found = _request_of(low, low.expr(arg), node, name)
    if name == "wait" and len(found) != 1:
        raise low.unsupported(node, "numba_mpi.wait() takes one request", "mpi.waitall((r1, r2))")
    for rq in sorted(found, key=lambda q: q.seq):
        if rq.waited is not None:
            raise low.unsupported(node, f"the request of the {rq.name}() of line {rq.line} is waited "
                                        f"for twice (first at line {rq.waited})",
                                  "wait for each request exactly once")
        rq.waited = low.src.loc(node).lineno
        if rq.name == "isend":
            low.emit(isend_wait, [rq.h] + rq.ops, node)
        else:
            value = low.emit(irecv_wait, [rq.h] + rq.ops, node, "received")
            low.blocks[low.cur].stmts.append(Stmt(None, Call(SetItem(("e",), "numba_mpi.irecv()", "unsafe", True),
                                                             [rq.ops[0], value]), low.src.loc(node)))
    return Const(0)
