"""MPI calls that compiled (cpu) code makes by symbol name, so that it can be cached on disk.

numba-mpi calls MPI through ctypes function pointers and reads the MPI handles
(``MPI_COMM_WORLD``, ``MPI_DOUBLE``) from addresses in mpi4py's objects that it keeps as
integer globals: numba freezes both into the machine code, which is then good in this
process only (numba refuses to cache the ctypes pointers, and the addresses differ from
process to process).  Every rank of an MPI program therefore compiled the same code for
itself.  The versions here refer to ``MPI_Sendrecv`` ... and to the handles by *name*
(``zyg_mpi_h<bits>_comm_world`` ...): each process registers those names with LLVM's
linker (:func:`setup`: the MPI library's own symbols, and the addresses of mpi4py's
handles), so the same machine code, loaded from numba's disk cache by another rank or a
later process, is linked to that process's library and handles.  The width of a handle
(``int`` in MPICH, a pointer in Open MPI) is part of the symbols' names and of the
functions' names, and so of the fingerprint of every generated module that calls them
(``zyg/compile.py``): code built for one ABI never links against another.

Covered: zyg's primitives of ``allreduce``, ``bcast``, ``reduce``, ``send``, ``recv``,
``sendrecv``, the non-blocking ``isend`` / ``irecv`` and their waits (the handles of
``zyg/tasks/mpi.py``, into whose slots MPI writes its requests), their reverses and forward
versions, and ``numba_mpi.rank`` / ``size`` / ``barrier`` / ``wtime``.  Code calling any
other numba-mpi function
keeps numba-mpi's calls and is compiled in every process (:func:`pins_process`).
"""
from __future__ import annotations

import ctypes
from typing import Any, Dict, Optional

import numpy as np

from ..backends import base as _backend_base, cpu as _backend_cpu

_STATE: Dict[str, Any] = {}

# numpy dtype -> the mpi4py datatype's attribute name
_DTYPES = {"float64": "DOUBLE", "float32": "FLOAT", "int64": "INT64_T", "int32": "INT32_T",
           "uint8": "CHAR", "complex128": "C_DOUBLE_COMPLEX", "complex64": "C_FLOAT_COMPLEX"}
_STATUS_INTS = 16       # room for an MPI_Status (5 ints in MPICH, 6 in Open MPI)


def setup() -> Optional[int]:
    """Register the MPI library and the handles with LLVM's linker (once per process);
    the width of a handle in bits, or None where MPI cannot be set up this way."""
    if "bits" in _STATE:
        return _STATE["bits"]
    _STATE["bits"] = None
    try:
        import llvmlite.binding as llvm
        from mpi4py import MPI
        from numba_mpi import common
        bits = 8 * ctypes.sizeof(common._MpiComm)
        if bits != 8 * ctypes.sizeof(common._MpiDatatype) or bits not in (32, 64) or not common.LIB:
            return None
        llvm.load_library_permanently(common.LIB)
        if llvm.address_of_symbol("MPI_Sendrecv") is None:
            return None
        llvm.add_symbol(f"zyg_mpi_h{bits}_comm_world", MPI._addressof(MPI.COMM_WORLD))
        llvm.add_symbol(f"zyg_mpi_h{bits}_op_sum", MPI._addressof(MPI.SUM))
        for name, attr in _DTYPES.items():
            llvm.add_symbol(f"zyg_mpi_h{bits}_{name}", MPI._addressof(getattr(MPI, attr)))
    except Exception:
        return None
    _STATE["bits"] = bits
    return bits


def _build(bits: int) -> Dict[str, Any]:
    """The intrinsics and the functions of this module for handles of ``bits`` bits."""
    from llvmlite import ir
    from numba.core import cgutils, types as nt
    from numba.extending import intrinsic

    i32 = ir.IntType(32)
    hty = ir.IntType(bits)
    i8p = ir.IntType(8).as_pointer()

    def handle(builder, name):
        mod = builder.module
        sym = f"zyg_mpi_h{bits}_{name}"
        gv = mod.globals.get(sym)
        if gv is None:
            gv = ir.GlobalVariable(mod, hty, sym)
            gv.linkage = "external"
        return builder.load(gv)

    def dtype_name(aty):
        name = str(np.dtype(aty.dtype.name)) if isinstance(aty.dtype, nt.Number) else None
        return name if name in _DTYPES else None

    def buffer(context, builder, aty, val):
        ary = context.make_array(aty)(context, builder, val)
        return builder.bitcast(ary.data, i8p), builder.trunc(ary.nitems, i32)

    @intrinsic
    def c_sendrecv(typingctx, send, dest, sendtag, recv, source, recvtag, status):
        if not all(isinstance(a, nt.Array) and a.layout == "C" for a in (send, recv, status)) or \
                dtype_name(send) is None or dtype_name(recv) is None or \
                not all(isinstance(a, nt.Integer) for a in (dest, sendtag, source, recvtag)):
            return None

        def codegen(context, builder, sig, args):
            sp, sn = buffer(context, builder, sig.args[0], args[0])
            rp, rn = buffer(context, builder, sig.args[3], args[3])
            st, _ = buffer(context, builder, sig.args[6], args[6])
            ints = [context.cast(builder, args[k], sig.args[k], nt.int32) for k in (1, 2, 4, 5)]
            fnty = ir.FunctionType(i32, [i8p, i32, hty, i32, i32, i8p, i32, hty, i32, i32, hty, i8p])
            fn = cgutils.get_or_insert_function(builder.module, fnty, "MPI_Sendrecv")
            return builder.call(fn, [sp, sn, handle(builder, dtype_name(sig.args[0])), ints[0], ints[1],
                                     rp, rn, handle(builder, dtype_name(sig.args[3])), ints[2], ints[3],
                                     handle(builder, "comm_world"), st])
        return nt.int32(send, dest, sendtag, recv, source, recvtag, status), codegen

    def emit(context, builder, sig, args, fname, layout):
        """Call ``fname`` with the operands ``layout`` names: ("buf", i) the data of array
        argument i, ("count", i) its size, ("dtype", i) its MPI datatype, ("int", i)
        argument i as an int, ("sum",) MPI_SUM, ("comm",) MPI_COMM_WORLD."""
        vals, tys = [], []
        for item in layout:
            what = item[0]
            if what == "buf":
                vals.append(buffer(context, builder, sig.args[item[1]], args[item[1]])[0])
                tys.append(i8p)
            elif what == "count":
                vals.append(buffer(context, builder, sig.args[item[1]], args[item[1]])[1])
                tys.append(i32)
            elif what == "dtype":
                vals.append(handle(builder, dtype_name(sig.args[item[1]])))
                tys.append(hty)
            elif what == "int":
                vals.append(context.cast(builder, args[item[1]], sig.args[item[1]], nt.int32))
                tys.append(i32)
            elif what == "sum":
                vals.append(handle(builder, "op_sum"))
                tys.append(hty)
            else:
                vals.append(handle(builder, "comm_world"))
                tys.append(hty)
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(i32, tys), fname)
        return builder.call(fn, vals)

    def arrays_ok(*arrs):
        return all(isinstance(a, nt.Array) and a.layout == "C" and dtype_name(a) is not None
                   for a in arrs)

    def ints_ok(*xs):
        return all(isinstance(a, nt.Integer) for a in xs)

    @intrinsic
    def c_allreduce(typingctx, send, recv):
        if not arrays_ok(send, recv):
            return None

        def codegen(context, builder, sig, args):
            return emit(context, builder, sig, args, "MPI_Allreduce",
                        [("buf", 0), ("buf", 1), ("count", 0), ("dtype", 0), ("sum",), ("comm",)])
        return nt.int32(send, recv), codegen

    @intrinsic
    def c_bcast(typingctx, buf, root):
        if not arrays_ok(buf) or not ints_ok(root):
            return None

        def codegen(context, builder, sig, args):
            return emit(context, builder, sig, args, "MPI_Bcast",
                        [("buf", 0), ("count", 0), ("dtype", 0), ("int", 1), ("comm",)])
        return nt.int32(buf, root), codegen

    @intrinsic
    def c_reduce(typingctx, send, recv, root):
        if not arrays_ok(send, recv) or not ints_ok(root):
            return None

        def codegen(context, builder, sig, args):
            return emit(context, builder, sig, args, "MPI_Reduce",
                        [("buf", 0), ("buf", 1), ("count", 0), ("dtype", 0), ("sum",), ("int", 2),
                         ("comm",)])
        return nt.int32(send, recv, root), codegen

    @intrinsic
    def c_send(typingctx, buf, dest, tag):
        if not arrays_ok(buf) or not ints_ok(dest, tag):
            return None

        def codegen(context, builder, sig, args):
            return emit(context, builder, sig, args, "MPI_Send",
                        [("buf", 0), ("count", 0), ("dtype", 0), ("int", 1), ("int", 2), ("comm",)])
        return nt.int32(buf, dest, tag), codegen

    @intrinsic
    def c_recv(typingctx, buf, source, tag, status):
        if not arrays_ok(buf) or not ints_ok(source, tag) or not isinstance(status, nt.Array):
            return None

        def codegen(context, builder, sig, args):
            return emit(context, builder, sig, args, "MPI_Recv",
                        [("buf", 0), ("count", 0), ("dtype", 0), ("int", 1), ("int", 2), ("comm",),
                         ("buf", 3)])
        return nt.int32(buf, source, tag, status), codegen

    def comm_query(fname):
        @intrinsic
        def query(typingctx):
            def codegen(context, builder, sig, args):
                out = cgutils.alloca_once_value(builder, ir.Constant(i32, 0))
                fnty = ir.FunctionType(i32, [hty, i32.as_pointer()])
                fn = cgutils.get_or_insert_function(builder.module, fnty, fname)
                err = builder.call(fn, [handle(builder, "comm_world"), out])
                # numba-mpi's convention: 0 where the call fails
                val = builder.select(builder.icmp_signed("==", err, ir.Constant(i32, 0)),
                                     builder.load(out), ir.Constant(i32, 0))
                return val
            return nt.int32(), codegen
        return query

    def request(context, builder, aty, val):
        """A pointer to the first element of array ``val`` (an int64 slot of a handle),
        where MPI writes or reads an ``MPI_Request``."""
        return builder.bitcast(context.make_array(aty)(context, builder, val).data, i8p)

    def start(fname):
        @intrinsic
        def call(typingctx, buf, peer, tag, req):
            if not arrays_ok(buf) or not ints_ok(peer, tag) or not isinstance(req, nt.Array) \
                    or req.dtype != nt.int64:
                return None

            def codegen(context, builder, sig, args):
                vals = [buffer(context, builder, sig.args[0], args[0])[0],
                        buffer(context, builder, sig.args[0], args[0])[1],
                        handle(builder, dtype_name(sig.args[0])),
                        context.cast(builder, args[1], sig.args[1], nt.int32),
                        context.cast(builder, args[2], sig.args[2], nt.int32),
                        handle(builder, "comm_world"),
                        request(context, builder, sig.args[3], args[3])]
                fnty = ir.FunctionType(i32, [i8p, i32, hty, i32, i32, hty, i8p])
                return builder.call(cgutils.get_or_insert_function(builder.module, fnty, fname), vals)
            return nt.int32(buf, peer, tag, req), codegen
        return call

    @intrinsic
    def c_wait(typingctx, req, status):
        if not isinstance(req, nt.Array) or req.dtype != nt.int64 or not isinstance(status, nt.Array):
            return None

        def codegen(context, builder, sig, args):
            fnty = ir.FunctionType(i32, [i8p, i8p])
            fn = cgutils.get_or_insert_function(builder.module, fnty, "MPI_Wait")
            return builder.call(fn, [request(context, builder, sig.args[0], args[0]),
                                     buffer(context, builder, sig.args[1], args[1])[0]])
        return nt.int32(req, status), codegen

    @intrinsic
    def c_barrier(typingctx):
        def codegen(context, builder, sig, args):
            fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(i32, [hty]), "MPI_Barrier")
            return builder.call(fn, [handle(builder, "comm_world")])
        return nt.int32(), codegen

    @intrinsic
    def c_wtime(typingctx):
        def codegen(context, builder, sig, args):
            fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.DoubleType(), []),
                                                "MPI_Wtime")
            return builder.call(fn, [])
        return nt.float64(), codegen

    return {"c_sendrecv": c_sendrecv, "c_rank": comm_query("MPI_Comm_rank"),
            "c_barrier": c_barrier, "c_wtime": c_wtime,
            "c_isend": start("MPI_Isend"), "c_irecv": start("MPI_Irecv"), "c_wait": c_wait,
            "c_size": comm_query("MPI_Comm_size"), "c_allreduce": c_allreduce,
            "c_bcast": c_bcast, "c_reduce": c_reduce, "c_send": c_send, "c_recv": c_recv}


# the Python sources of the compiled versions (compiled with the intrinsics as globals);
# their names carry the handle width (the fingerprint of generated code names them)

_SRC = '''
def sendrecv__{tag}(x, dest, like, source, sendtag, recvtag):
    if source < 0:
        raise ValueError("zyg: a receive from any source cannot be differentiated; pass the rank")
    out = np.empty_like(np.ascontiguousarray(like))
    send = np.ascontiguousarray(x)
    status = np.empty(STATUS_INTS, np.intc)
    c_sendrecv(send, dest, sendtag, out, source, recvtag, status)
    return out


def sendrecv_back_{tag}(dy, source, like, dest, sendtag, recvtag):
    out = np.empty_like(np.ascontiguousarray(like))
    t = 0 if recvtag < 0 else recvtag
    send = np.ascontiguousarray(dy)
    status = np.empty(STATUS_INTS, np.intc)
    c_sendrecv(send, source, t, out, dest, sendtag, status)
    return out


def allreduce_sum_{tag}(x):
    a = np.ascontiguousarray(np.atleast_1d(np.asarray(x)))
    out = np.empty_like(a)
    c_allreduce(a, out)
    return out


def bcast_from_{tag}(x, root):
    out = np.ascontiguousarray(x).copy()
    c_bcast(out, root)
    return out


def reduce_sum_{tag}(x, old, root):
    a = np.ascontiguousarray(np.atleast_1d(np.asarray(x)))
    out = np.ascontiguousarray(old).copy()
    c_reduce(a, out, root)
    return out


def send_to_{tag}(x, dest, tag):
    return c_send(np.ascontiguousarray(x), dest, tag)


def recv_from_{tag}(like, source, tag):
    if source < 0:
        raise ValueError("zyg: a receive from any source cannot be differentiated; pass the rank")
    out = np.empty_like(np.ascontiguousarray(like))
    status = np.empty(STATUS_INTS, np.intc)
    c_recv(out, source, tag, status)
    return out


def bcast_back_{tag}(dy, root):
    d = np.ascontiguousarray(dy)
    out = np.zeros_like(d)
    c_reduce(d, out, root)
    if c_rank() != root:
        out[...] = 0.0
    return out


def reduce_back_{tag}(dy, root):
    out = np.ascontiguousarray(dy).copy()
    c_bcast(out, root)
    return out


def reduce_keep_{tag}(dy, root):
    if c_rank() == root:
        return np.zeros_like(dy)
    return dy.copy()


def send_back_{tag}(like, dest, tag):
    out = np.empty_like(np.ascontiguousarray(like))
    status = np.empty(STATUS_INTS, np.intc)
    c_recv(out, dest, tag, status)
    return out


def recv_back_{tag}(dy, source, tag):
    t = 0 if tag < 0 else tag
    return c_send(np.ascontiguousarray(dy), source, t)


# non-blocking calls: the handles of zyg/tasks/mpi.py (``[req0, req1, 0, 0 | data]``, int64),
# MPI writing each request into its slot; a pair of requests is waited one by one

def _data_{tag}(h, like, k):
    a = np.ascontiguousarray(like)
    nw = (a.size * a.itemsize + 7) // 8
    return h[HEAD + k * nw:HEAD + (k + 1) * nw].view(a.dtype)[:a.size]


def _handle_{tag}(like, copies):
    a = np.ascontiguousarray(like)
    nw = (a.size * a.itemsize + 7) // 8
    return np.zeros(HEAD + copies * nw, np.int64)


def _post_send_{tag}(h, a, src, k, dest, tag):
    """Copy ``src`` into the handle's k-th buffer and send it (request k)."""
    b = _data_{tag}(h, a, k)
    b[:] = np.ascontiguousarray(src).reshape(a.size)
    c_isend(b, dest, tag, h[k:k + 1])


def _post_recvs_{tag}(like, source, tag, copies):
    """A handle with ``copies`` receive buffers, each receive posted."""
    if source < 0:
        raise ValueError("zyg: a receive from any source cannot be differentiated; pass the rank")
    h = _handle_{tag}(like, copies)
    for k in range(copies):
        c_irecv(_data_{tag}(h, like, k), source, tag, h[k:k + 1])
    return h


def isend_start_{tag}(x, dest, tag):
    a = np.ascontiguousarray(x)
    h = _handle_{tag}(a, 1)
    _post_send_{tag}(h, a, a, 0, dest, tag)
    return h


def irecv_start_{tag}(like, source, tag):
    return _post_recvs_{tag}(like, source, tag, 1)


def isend_wait_{tag}(h, x, dest, tag):
    status = np.empty(STATUS_INTS, np.intc)
    return c_wait(h[0:1], status)


def irecv_wait_{tag}(h, like, source, tag):
    status = np.empty(STATUS_INTS, np.intc)
    c_wait(h[0:1], status)
    a = np.ascontiguousarray(like)
    return _data_{tag}(h, a, 0).reshape(a.shape).copy()


def isend_start2_{tag}(x, tx, dest, tag):
    a = np.ascontiguousarray(x)
    h = _handle_{tag}(a, 2)
    _post_send_{tag}(h, a, a, 0, dest, tag)
    _post_send_{tag}(h, a, tx, 1, dest, tag)
    return h


def irecv_start2_{tag}(like, source, tag):
    return _post_recvs_{tag}(like, source, tag, 2)


def isend_wait2_{tag}(h):
    status = np.empty(STATUS_INTS, np.intc)
    e = c_wait(h[0:1], status)
    e2 = c_wait(h[1:2], status)
    return e if e != 0 else e2


def irecv_wait2_{tag}(h, like):
    status = np.empty(STATUS_INTS, np.intc)
    c_wait(h[0:1], status)
    c_wait(h[1:2], status)
    a = np.ascontiguousarray(like)
    return _data_{tag}(h, a, 0).reshape(a.shape).copy()


def irecv_tangent2_{tag}(h, like):
    a = np.ascontiguousarray(like)
    return _data_{tag}(h, a, 1).reshape(a.shape).copy()


def barrier_{tag}():
    return c_barrier()


def wtime_{tag}():
    return c_wtime()


def rank_{tag}():
    return c_rank()


def size_{tag}():
    return c_size()
'''


def natives(jit, options: str) -> Dict[int, Any]:
    """id(function) -> its compiled version calling MPI by name (``jit``: the back end's
    njit, whose options ``options`` names), for the functions this module covers; empty
    where MPI cannot be set up so."""
    bits = setup()
    if bits is None:
        return {}
    key = ("natives", bits, options)
    got = _STATE.get(key)
    if got is not None:
        return got
    import numba_mpi
    from . import mpi
    tag = f"h{bits}"
    glob: Dict[str, Any] = {"np": np, "STATUS_INTS": _STATUS_INTS, "HEAD": mpi._HEAD,
                            "__name__": __name__}
    glob.update(_build(bits))
    exec(compile(_SRC.format(tag=tag), f"<zyg mpi natives {tag}>", "exec"), glob)
    for name in ("_data", "_handle", "_post_send", "_post_recvs"):  # helpers the others call
        glob[f"{name}_{tag}"] = jit(glob[f"{name}_{tag}"])
    got = {id(getattr(mpi, name)): jit(glob[f"{name}_{tag}"])
           for name in ("sendrecv_", "sendrecv_back", "allreduce_sum", "bcast_from", "reduce_sum",
                        "send_to", "recv_from", "bcast_back", "reduce_back", "reduce_keep",
                        "send_back", "recv_back", "isend_start", "irecv_start", "isend_wait",
                        "irecv_wait", "isend_start2", "irecv_start2", "isend_wait2", "irecv_wait2",
                        "irecv_tangent2")}
    for name in ("rank", "size", "barrier", "wtime"):
        f = getattr(numba_mpi, name, None)
        if f is not None:
            got[id(f)] = jit(glob[f"{name}_{tag}"])
    _STATE[key] = got
    return got


def pins_process(obj: Any) -> bool:
    """Compiled code calling ``obj`` holds addresses of this process (numba-mpi's ctypes
    calls and handle addresses): it is compiled in every process, never cached."""
    import types
    if isinstance(obj, types.ModuleType):
        return obj.__name__.startswith("numba_mpi")
    fn = getattr(obj, "py_func", obj)
    mod = getattr(fn, "__module__", None) or ""
    if not isinstance(mod, str):
        return False
    return mod.startswith("numba_mpi") or mod == "zyg.tasks.mpi"


# (the functions of zyg.tasks.mpi that natives() replaces never reach pins_process on cpu:
# generated code refers to the replacements)


def _natives_in_use(jit, options: str) -> Dict[int, Any]:
    # only once differentiated code calls numba-mpi (setting MPI up starts it)
    import sys
    return natives(jit, options) if "numba_mpi" in sys.modules else {}


# the back ends (a layer below) consult these
_backend_base.PROCESS_PINNED.append(pins_process)
_backend_cpu.NATIVE_HELPERS.append(_natives_in_use)
