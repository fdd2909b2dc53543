"""Parallel loops: ``for i in numba.prange(...)`` differentiated, running in parallel (issue 26).

The front end (``Lowerer.parallel_loop`` in ``zyg/ssa/lower.py``) turns the loop's body into
a *step function* of one iteration, ``step(i, *written arrays, *sums, *read values) ->
(*written arrays, *sums)``, and the loop into one primitive call ``z = PLoop(runner)(T, start, 0, *carried,
*read)`` whose value is the loop's carried values packed into one float64 vector, read
back by one ``PPart(k)`` per carried value (the written arrays' new contents are written
back into them, a write the adjoint rewinds as any other).  The carried values are the
arrays the body writes into and its sum reductions (``s += e``); every other value the
body assigns is private to its iteration, as numba makes it.  ``m = max(m, e)`` and
``min`` are reductions too: the forward pass keeps every iteration's candidate and picks
the winner (the earliest of equal ones; the value before the loop if none beats it), and
the reverse gives the cotangent to the winner only.  Other reductions (``*=``) and values
carried otherwise are refused at the user's line.

In a gradient the loop is a *compiled pair* (:func:`build_pair`; the emitter's side is
``NativeMixin.native_loop`` in ``pullbacks/native.py``), called from the gradient's own
code as a recursive function's pair is: ``rp`` pushes the written arrays' contents onto
the caller's stacks and runs the forward loop in place; ``ra`` restores them and runs the
backward loop, adding into the caller's shadows.  The read-outs and write-backs that the
lowering emits after the loop are absorbed into it.  Elsewhere (forward mode, code that
records no tape, kinds a pair does not take such as complex numbers, and with
``ZYG_NATIVE_LOOPS=0``) the loop is a function of values called through the run-time
path (:func:`build`: ``PRunner.forward`` and ``vjp``, copies in and out).

What runs, as compiled code of the target (``parallel=True`` on cpu; serially on the
python target, the same semantics):

* forward: the iterations of the step's plain primal, in a ``prange`` over a copy of
  the written arrays; each sum adds up the iterations' contributions (a numba reduction);
* backward: the cotangents of the final written arrays and sums unpacked, then a
  ``prange`` in which each iteration runs the step's primal once more with its own tape
  (*recomputation*: no tape is kept between the passes, so the tape is indexed by
  iteration by construction and never shared between threads) and at once its adjoint,
  which restores the elements it wrote and adds into the shadows in place
  (``transform.emit_step``: no array of the loop's size is allocated per iteration):
  - a written array's shadow is shared: its iterations write disjoint elements (numba's
    rule for a parallel loop), so they touch disjoint elements of the shadow.  A written
    array that the body also reads at other indices than it writes (the lowering checks
    the subscripts) would have iterations adding into one element: that loop's backward
    runs its iterations serially;
  - a read-only array the body only subscripts with the loop variable first (``y[i]``,
    ``X[i, j]``) has one shadow: no two iterations touch one of its elements;
  - one read element by element at indices computed from the loop variable (stencil
    neighbours ``u[(i + 1) % n]``, gathers ``x[idx[i]]``) has one shadow with atomic
    additions (``pullbacks/atomics.py``): the iterations spread over its elements;
  - any other read-only array (shared parameters as GMM's means, read at the same
    elements by every iteration) has one shadow row per thread (``numba.get_thread_id``),
    summed after the loop;
  - a read-only number's cotangent is a sum over iterations (a numba reduction), and a
    sum's cotangent reaches every iteration unchanged (the reverse of a reduction is a
    broadcast);
* tangent (``jvp``, ``hvp``'s forward part): the iterations of the step's jvp in a
  ``prange``, writing the written arrays' tangents in place.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import numba
import numpy as np

from .. import backends
from ..build import ForwardMode, Program, Split, Transform, build as build_program, load
from ..caches import BUILD_LOCK
from ..driver import _ident, _kinds, ssa_of
from ..errors import TypeMismatch, UnsupportedSyntax
from ..nested.ckloop import PACKED_KIND, CkLoop, CkPart, PartRunner, _no_hidden, _pack_src, \
    _unpack_src
from ..pullbacks.transform import emit_step, plan
from ..ssa import hooks
from ..pullbacks import looppairs
from ..pullbacks.tape import grow
from ..ssa.analysis import array_dtype, differentiable, is_array, is_tuple

_ARRAY_DTYPES = ("float64", "float32", "int64", "int32", "int16", "int8", "uint8", "bool")


def _err(cls, msg: str, loc, hint: str = None):
    return cls(msg, loc.filename if loc else None, loc.lineno if loc else None,
               loc.col if loc else None, hint=hint)


def check_kinds(kinds: List[str], n_arrays: int, n: int, names: List[str], loc) -> None:
    for k, nm in zip(kinds[:n_arrays], names):
        if not is_array(k) or array_dtype(k) not in _ARRAY_DTYPES:
            raise _err(TypeMismatch, f"prange loop: the loop writes into {nm!r}, a {k} value; "
                                     "zyg differentiates parallel loops writing into arrays of "
                                     "numbers", loc)
    for k, nm in zip(kinds[n_arrays:n], names[n_arrays:n]):
        if k not in ("float", "int"):
            raise _err(TypeMismatch, f"prange loop: {nm!r} is a sum reduction of {k} values; "
                                     "zyg differentiates sums of numbers", loc,
                       "add into an array element per iteration, or into a preallocated array "
                       "indexed by the loop variable")
    for k, nm in zip(kinds[n:], names[n:]):
        if is_tuple(k):
            raise _err(TypeMismatch, f"prange loop: the body reads the tuple {nm!r}; unpack it "
                                     "into separate variables before the loop", loc)


def _check_calls(p, loc) -> None:
    """MPI calls (numba-mpi) inside a parallel loop's body would communicate from several
    threads at once, in an order that changes from run to run: refused."""
    for blk in p.fn.iter_blocks():
        for st in blk.stmts:
            if getattr(st.expr.fn, "_zyg_comm", None) is not None:
                raise _err(UnsupportedSyntax, "the body of a prange loop calls MPI; its threads "
                                              "would communicate in no fixed order", loc,
                           "communicate before or after the parallel loop")


def _check_writes(p, n_arrays: int, n: int, names: List[str], loc) -> None:
    """A read-only operand must stay read-only: an array the step writes through a view or a
    called function, which the lowering did not see as written, is refused."""
    params = p.fn.params[1:]
    for j, q in enumerate(params[n:]):
        if is_array(p.kinds[q.id]) and p.aliases.is_mutated(q.id):
            raise _err(UnsupportedSyntax,
                       f"the prange loop writes into {names[n + j]!r} through a view or a "
                       "called function", loc,
                       f"write its elements in the loop body itself ({names[n + j]}[i] = ...)")


def _element_reads_only(p, q) -> bool:
    """Is every use of array parameter ``q`` in the step a read of one element
    (``q[i, j]``)?  Then its shadow receives only element additions, which can be atomic."""
    from ..ssa.prims import GetItem
    root = p.aliases.find(q.id)

    def ours(a) -> bool:
        return hasattr(a, "id") and is_array(p.kinds.get(a.id, "")) and p.aliases.find(a.id) == root
    for blk in p.fn.iter_blocks():
        for st in blk.stmts:
            e = st.expr
            for k, a in enumerate(e.args):
                if not ours(a):
                    continue
                if k != 0 or not isinstance(e.fn, GetItem) or any(c != "i" for c in e.fn.spec) \
                        or st.var is None or is_array(p.kinds.get(st.var.id, "")):
                    return False
            if any(ours(a) for a in e.kwargs.values()):
                return False
        for _, args in blk.term.successors():
            if any(ours(a) for a in args):
                return False
    return True


class _Compiled:
    def __init__(self, fwd, bwd, diff_free: List[int]):
        self.fwd = fwd
        self.bwd = bwd
        self.diff_free = diff_free


def _thread_id_python() -> int:
    return 0


def _sum_rows(rows):
    out = rows[0].copy()
    for t in range(1, rows.shape[0]):
        out += rows[t]
    return out


def _parallel(backend):
    """(prange, thread id, jit of a parallel function) on this target."""
    if backend.compiled:
        return (numba.prange, backend.helper(_thread_id_numba),
                lambda f: backend.jit(f, parallel=True))
    return range, _thread_id_python, backend.jit


def _thread_id_numba() -> int:
    return numba.get_thread_id()


def _zero(k: str) -> str:
    return "0" if k == "int" else "0.0"


_DT = {"int": "int64", "float": "float64"}


def _identity(op: str, k: str) -> str:
    """The value a reduction starts each iteration's contribution from."""
    if op == "max":
        return "-9223372036854775807" if k == "int" else "-np.inf"
    if op == "min":
        return "9223372036854775807" if k == "int" else "np.inf"
    return _zero(k)


def _tuple(names: List[str]) -> str:
    return "(" + "".join(n + ", " for n in names) + ")"


class _ParallelStep(Transform):
    """One iteration of a parallel loop, ``stem_primal(*args, *shadows)`` and
    ``stem_adjoint(*tape, dy)`` adding into the given shadows (atomically for the
    parameters ``atomic``); ``info``: the positions of the given shadows."""

    def __init__(self, atomic: List[int]):
        self.atomic = atomic

    def emit(self, p, stem: str) -> Program:
        code, ns, _, given = emit_step(p, stem, self.atomic)
        return Program(code, ns.ns, [stem + "_primal", stem + "_adjoint"], stem, given)


class _Step:
    """One parallel loop's step compiled for one set of kinds and one target: its plain
    primal ``run``, its recording primal ``rec`` (given the shadows) and adjoint ``adj``,
    and what the loops around them generate from."""

    def __init__(self, runner: "PRunner", kinds: List[str], backend):
        step, n, na = runner.step, runner.n, runner.arrays
        ir = ssa_of(step)
        _no_hidden(ir, step)
        skinds = ["int"] + list(kinds)
        m = len(kinds) - n
        stem = self.stem = _ident(ir.name)
        self.backend = backend
        self.prange, self.tid, self.pjit = _parallel(backend)
        p0 = plan(ir, skinds, [], backend)
        _check_calls(p0, runner.loc)
        (self.run,) = build_program(Split(adjoint=False), p0, stem + "_run").fns
        diff = [i for i, k in enumerate(skinds) if differentiable(k)]
        p1 = plan(ir, skinds, diff, backend)
        _check_writes(p1, na, n, runner.names, runner.loc)
        self.atomic = [1 + n + j for j in range(m) if runner.names[n + j] in runner.scattered
                       and _element_reads_only(p1, p1.fn.params[1 + n + j])]
        built = build_program(_ParallelStep(self.atomic), p1, stem + "_rev")
        (self.rec, self.adj), self.given = built.fns, built.info
        self.runner, self.n, self.na, self.m = runner, n, na, m
        self.cn = [f"c{i}" for i in range(n)]
        self.fn_ = [f"f{j}" for j in range(m)]
        self.ck, self.fk = kinds[:n], kinds[n:]
        self.sums = list(range(na, n))
        self.diff_free = [j for j in range(m) if differentiable(self.fk[j])]
        self.slot = {i - 1: s for s, i in enumerate(diff)}      # operand index -> adjoint result slot
        self.ops = runner.ops
        self.mm = [i for i in self.sums if self.ops[i] in ("max", "min")]

    def glob(self) -> Dict[str, Any]:
        return {"np": np, "_pl_run": self.run, "_pl_rec": self.rec, "_pl_adj": self.adj,
                "_pl_prange": self.prange, "_pl_tid": self.tid,
                "_pl_sum_rows": self.backend.helper(_sum_rows)}

    def take(self, i: int) -> str:
        return "_r" if self.n == 1 else f"_r[{i}]"

    def step_args(self, t: str, arrays: List[str]) -> List[str]:
        return [t] + arrays + [_identity(self.ops[i], self.ck[i]) for i in self.sums] + self.fn_

    def winners(self, lines: List[str], ind: str) -> None:
        """``_w<i>``: the iteration whose candidate won min/max reduction i (-1: the value
        before the loop; ties go to the earliest), ``_b<i>`` the result."""
        for i in self.mm:
            cmp = ">" if self.ops[i] == "max" else "<"
            lines.append(f"{ind}_w{i} = -1")
            lines.append(f"{ind}_b{i} = c{i}")
            lines.append(f"{ind}for _k in range(T):")
            lines.append(f"{ind}    if _v{i}[_k] {cmp} _b{i}:")
            lines.append(f"{ind}        _b{i} = _v{i}[_k]")
            lines.append(f"{ind}        _w{i} = _k")

    def forward_loop(self, lines: List[str]) -> None:
        """The iterations in parallel over the written arrays ``c<i>``; then ``c<i>`` of a
        reduction is its result."""
        ck = self.ck
        for i in self.sums:
            if i in self.mm:
                lines.append(f"    _v{i} = np.empty(T, np.{_DT[ck[i]]})")
            else:
                lines.append(f"    _s{i} = {_zero(ck[i])}")
        lines.append("    for _k in _pl_prange(T):")
        lines.append(f"        _r, _tp = _pl_run({', '.join(self.step_args('t0 + _k', self.cn[:self.na]))})")
        for i in self.sums:
            lines.append(f"        _v{i}[_k] = {self.take(i)}" if i in self.mm
                         else f"        _s{i} += {self.take(i)}")
        self.winners(lines, "    ")
        for i in self.sums:
            lines.append(f"    c{i} = _b{i}" if i in self.mm else f"    c{i} = c{i} + _s{i}")

    def backward_loop(self, lines: List[str], inplace: bool) -> List[str]:
        """Each iteration recomputed with its own tape, then reversed at once, adding into
        the shadows; returns the names of the cotangents of the read-only operands (in
        ``diff_free`` order; ``inplace``: the numbers' only, the arrays' shadows are the
        caller's ``sh<o>``, added into in place).  ``d<i>`` holds the cotangent of carried
        value ``i`` (a written array's shadow) before, and of its initial value after."""
        runner, n, na, fk = self.runner, self.n, self.na, self.fk
        serial = bool(runner.shared)
        loop = "range" if serial else "_pl_prange"
        shadows, rows = [], []
        for i in self.given:                # skinds index of a float array parameter
            o = i - 1
            if o < n:
                shadows.append(f"d{o}")
            elif runner.names[o] in runner.private or i in self.atomic:
                # read only at the iteration's own elements (x[i]): one shadow, no races; read
                # at scattered elements (u[i - 1], x[idx[i]]): one shadow, atomic additions
                j = o - n
                if inplace:
                    shadows.append(f"sh{o}")
                else:
                    lines.append(f"    _gp{j} = np.zeros(f{j}.shape, f{j}.dtype)")
                    shadows.append(f"_gp{j}")
            else:
                j = o - n
                lines.append(f"    _gr{j} = np.zeros((_nt,) + f{j}.shape, f{j}.dtype)")
                shadows.append(f"_gr{j}[_tid]")
                rows.append(j)
        for j in self.diff_free:
            if not is_array(fk[j]):
                lines.append(f"    _gs{j} = 0.0")
        if self.mm:
            # which iteration won each min/max: the candidates once more, on a copy of the
            # written arrays (the iterations' own writes must not be seen by their recomputation)
            for i in range(na):
                lines.append(f"    _cw{i} = c{i}.copy()")
            for i in self.mm:
                lines.append(f"    _v{i} = np.empty(T, np.{_DT[self.ck[i]]})")
            lines.append("    for _k in _pl_prange(T):")
            lines.append(f"        _r, _tp = _pl_run({', '.join(self.step_args('t0 + _k', [f'_cw{i}' for i in range(na)]))})")
            for i in self.mm:
                lines.append(f"        _v{i}[_k] = {self.take(i)}")
            self.winners(lines, "    ")
        # the written arrays' cotangents are in their shadows: their parts of dy are not read;
        # a sum's cotangent reaches every iteration, a min/max's only the winner's
        dys = [f"_e{i}" if i in self.mm else f"d{i}" for i in range(n)]
        dy = dys[0] if n == 1 else _tuple(dys)
        lines.append(f"    for _k in {loop}(T):")
        for i in self.mm:
            lines.append(f"        _e{i} = 0.0")
            lines.append(f"        if _k == _w{i}:")
            lines.append(f"            _e{i} = d{i}")
        lines.append("        _tid = 0" if serial else "        _tid = _pl_tid()")
        lines.append(f"        _r, _tp = _pl_rec({', '.join(self.step_args('t0 + _k', self.cn[:na]) + shadows)})")
        lines.append(f"        _g = _pl_adj(*_tp, {dy})")
        for j in self.diff_free:
            if not is_array(fk[j]):
                lines.append(f"        _gs{j} += _g[{self.slot[n + j]}]")
        for i in self.mm:
            lines.append(f"    if _w{i} != -1:")
            lines.append(f"        d{i} = 0.0")
        gs = []
        for j in self.diff_free:
            if is_array(fk[j]):
                if inplace:
                    if j in rows:
                        lines.append(f"    sh{n + j} += _pl_sum_rows(_gr{j})")
                    continue
                lines.append(f"    g{j} = _pl_sum_rows(_gr{j})" if j in rows else f"    g{j} = _gp{j}")
            else:
                lines.append(f"    g{j} = _gs{j}")
            gs.append(f"g{j}")
        return gs


def build(runner: "PRunner", kinds: List[str], target: str) -> _Compiled:
    """The loop as a function of values (the run-time path: ``PRunner.forward``/``vjp``):
    ``_pl_fwd(T, t0, *carried, *read) -> packed carried values`` and ``_pl_bwd(T, t0,
    *carried, *read, dz, nthreads) -> (*cotangents of carried, *of read)``."""
    S = _Step(runner, kinds, backends.get(target))
    n, na, ck, cn, fn_ = S.n, S.na, S.ck, S.cn, S.fn_
    lines: List[str] = []
    # -- forward: the iterations in parallel over a copy of the written arrays
    lines.append(f"def _pl_fwd(T, t0, {', '.join(cn + fn_)}):")
    for i in range(na):
        lines.append(f"    c{i} = c{i}.copy()")
    S.forward_loop(lines)
    _pack_src(lines, ck, cn, "_z", "    ")
    lines.append("    return _z")
    lines.append("")
    # -- backward: on copies of the written arrays, into fresh shadows
    ds = [f"d{i}" for i in range(n)]
    lines.append(f"def _pl_bwd(T, t0, {', '.join(cn + fn_)}, dz, _nt):")
    _unpack_src(lines, ck, cn, "dz", ds, "    ")
    for i in range(na):
        lines.append(f"    c{i} = c{i}.copy()")
    gs = S.backward_loop(lines, inplace=False)
    lines.append(f"    return {_tuple(ds + gs)}")
    src = "\n".join(lines) + "\n"
    glob = S.glob()
    exec(compile(src, f"<zyg prange loop {S.stem}>", "exec"), glob)
    out = _Compiled(S.pjit(glob["_pl_fwd"]), S.pjit(glob["_pl_bwd"]), S.diff_free)
    out.source = src
    return out


# -- the loop as a compiled pair (pullbacks/native.py's protocol) --------------------------

def pair_possible(kinds: List[str], n: int, na: int) -> bool:
    """Can the loop with operand kinds ``kinds`` (carried, then read) run as a compiled pair?"""
    return looppairs.operands_ok(kinds) and all(is_array(k) for k in kinds[:na])


def build_pair(runner: "PRunner", kinds: List[str], backend) -> looppairs.LoopPair:
    """The loop as a compiled pair (``pullbacks/looppairs.py``): its written arrays in
    place, its reductions the values."""
    S = _Step(runner, kinds, backend)
    na, ck, cn, fn_ = S.na, S.ck, S.cn, S.fn_
    scalar_diff, array_diff = looppairs.positions(kinds)
    for i in S.given:
        assert i + 2 in array_diff, (i, array_diff)
    stem = S.stem + "_pl"
    ops_all = ["T", "t0", "s"] + cn + fn_
    stacks = looppairs.stack_params()
    lines: List[str] = []
    # -- the forward loop in place; the reductions' results packed
    lines.append(f"def {stem}_ipf(T, t0, {', '.join(cn + fn_)}):")
    S.forward_loop(lines)
    lines.append(f"    _z = np.empty({len(S.sums)})")
    for j, i in enumerate(S.sums):
        lines.append(f"    _z[{j}] = c{i}")
    lines.append("    return _z")
    lines.append("")
    # -- the backward loop on the restored arrays, into the caller's shadows
    sh = [f"sh{q - 3}" for q in array_diff]
    dsum = [f"d{i}" for i in S.sums]
    lines.append(f"def {stem}_ipb(T, t0, {', '.join(cn + fn_ + sh + dsum)}, _nt):")
    for i in range(na):
        lines.append(f"    d{i} = {f'sh{i}' if differentiable(ck[i]) else f'c{i}'}")
    gs = S.backward_loop(lines, inplace=True)
    outs = [f"d{i}" for i in S.sums if differentiable(ck[i])] + gs
    lines.append(f"    return {_tuple(outs)}")
    lines.append("")
    # -- the pair: records of the written arrays on the caller's stacks
    loop = "_pl_prange"
    lines.append(f"def {stem}_rp({', '.join(ops_all)}, _lim, {', '.join(stacks)}):")
    lines.append("    T = max(T, 0)")
    looppairs.save_arrays(lines, ck[:na], cn[:na], loop)
    lines.append(f"    _z = {stem}_ipf(T, t0, {', '.join(cn + fn_)})")
    lines.append(f"    return (_z, {', '.join(stacks)})")
    lines.append("")
    lines.append(f"def {stem}_ra({', '.join(ops_all + sh + dsum)}, _lim, {', '.join(stacks)}):")
    lines.append("    T = max(T, 0)")
    looppairs.restore_arrays(lines, ck[:na], cn[:na], loop)
    lines.append(f"    _g = {stem}_ipb(T, t0, {', '.join(cn + fn_ + sh + dsum)}, _pl_nthreads)")
    res = [f"_g[{k}]" for k in range(len(outs))] + looppairs.tops()
    lines.append(f"    return {_tuple(res)}")
    src = "\n".join(lines) + "\n"
    code = looppairs.typed_code(src)
    ns = S.glob()
    # rows of per-thread shadows: numba.get_thread_id() < get_num_threads() <= this, a
    # constant of the module's text (so of its disk cache); numba's get_num_threads() in
    # compiled code would keep the code out of the disk cache (a dynamic global)
    ns.update({"_pl_grow": backend.helper(grow),
               "_pl_nthreads": numba.config.NUMBA_NUM_THREADS if backend.compiled else 1,
               "_zyg_parallel": tuple(stem + x for x, par in (
                   ("_ipf", True), ("_ipb", not runner.shared or S.mm), ("_rp", na), ("_ra", na)) if par)
               if backend.compiled else ()})
    ipf, ipb, rp, ra = load(Program(code, ns, [stem + s for s in ("_ipf", "_ipb", "_rp", "_ra")], stem),
                            backend).fns
    return looppairs.LoopPair(rp, ra, scalar_diff, array_diff, S.sums, ipf, ipb, src)


def build_tangent(runner: "PRunner", kinds: List[str], target: str):
    """``_pl_tan(T, t0, *carried, *read, *their tangents)``: the packed tangent of the
    carried values (the step's jvp per iteration, in parallel)."""
    step, n, na = runner.step, runner.n, runner.arrays
    ir = ssa_of(step)
    _no_hidden(ir, step)
    skinds = ["int"] + list(kinds)
    stem = _ident(ir.name) + "_tan"
    backend = backends.get(target)
    prange, _, pjit = _parallel(backend)
    p = plan(ir, skinds, [i for i, k in enumerate(skinds) if differentiable(k)], backend)
    _check_calls(p, runner.loc)
    _check_writes(p, na, n, runner.names, runner.loc)
    built = build_program(ForwardMode(copy_args=False), p, stem)
    (jf,), fwd = built.fns, built.info
    m = len(kinds) - n
    ck = kinds[:n]
    sums = list(range(na, n))
    cn = [f"c{i}" for i in range(n)]
    fn_ = [f"f{j}" for j in range(m)]
    tcn = [f"tc{i}" for i in range(n)]
    tfn = [f"tf{j}" for j in range(m)]
    ops = runner.ops
    mm = [i for i in sums if ops[i] in ("max", "min")]
    primal = [None] + cn[:na] + [_identity(ops[i], ck[i]) for i in sums] + fn_
    tans = [None] + tcn[:na] + ["0.0" for _ in sums] + tfn
    act = [tans[i] for i, q in enumerate(p.fn.params) if fwd.active(q)]
    lines = [f"def _pl_tan(T, t0, {', '.join(cn + fn_ + tcn + tfn)}):"]
    for i in range(na):
        lines.append(f"    c{i} = c{i}.copy()")
        lines.append(f"    tc{i} = tc{i}.copy()")
    for i in sums:
        if i in mm:
            lines.append(f"    _v{i} = np.empty(T, np.{_DT[ck[i]]})")
            lines.append(f"    _tv{i} = np.empty(T)")
        else:
            lines.append(f"    _s{i} = {_zero(ck[i])}")
            lines.append(f"    _ts{i} = 0.0")
    lines.append("    for _k in _pl_prange(T):")
    lines.append(f"        _r, _tr = _pl_jvp({', '.join(['t0 + _k'] + primal[1:] + act)})")
    for i in sums:
        r = "_r" if n == 1 else f"_r[{i}]"
        tr = "_tr" if n == 1 else f"_tr[{i}]"
        if i in mm:
            lines.append(f"        _v{i}[_k] = {r}")
            lines.append(f"        _tv{i}[_k] = {tr}")
        else:
            lines.append(f"        _s{i} += {r}")
            lines.append(f"        _ts{i} += {tr}")
    for i in mm:        # the winner's tangent (-1: the value before the loop)
        cmp = ">" if ops[i] == "max" else "<"
        lines.append(f"    _b{i} = c{i}")
        lines.append("    for _k in range(T):")
        lines.append(f"        if _v{i}[_k] {cmp} _b{i}:")
        lines.append(f"            _b{i} = _v{i}[_k]")
        lines.append(f"            tc{i} = _tv{i}[_k]")
    for i in sums:
        if i not in mm:
            lines.append(f"    tc{i} = tc{i} + _ts{i}")
    _pack_src(lines, ck, tcn, "_z", "    ")
    lines.append("    return _z")
    src = "\n".join(lines) + "\n"
    glob = {"np": np, "_pl_jvp": jf, "_pl_prange": prange}
    exec(compile(src, f"<zyg prange loop {stem}>", "exec"), glob)
    return pjit(glob["_pl_tan"])


class PRunner:
    """The run-time side of one parallel loop: its step function, compiled per kinds."""
    _zyg_runner = True

    def __init__(self, step: Any, n: int, names: List[str], loc):
        self.step = step
        self.n = n                  # carried values: the written arrays, then the sums
        self.arrays = n             # set by the lowering: how many carried values are arrays
        self.shared: List[str] = []     # written arrays read elsewhere (serial backward)
        self.private: List[str] = []    # arrays only indexed by the loop variable first
        self.scattered: List[str] = []  # read arrays indexed by values of the loop variable
        self.ops: List[str] = ["array"] * n     # per carried value: array, sum, max or min
        self.names = names
        self.loc = loc
        self.cache: Dict[Tuple[Tuple[str, ...], str], _Compiled] = {}
        self.tangents: Dict[Tuple[Tuple[str, ...], str], Any] = {}
        self.pairs: Dict[Tuple[Tuple[str, ...], Any], looppairs.LoopPair] = {}
        self.helpers: Dict[Any, Any] = {}
        self.__name__ = f"prange_loop_{getattr(step, '__name__', 'step')}"

    def pair(self, kinds: List[str], backend) -> Optional[looppairs.LoopPair]:
        r = self
        if not pair_possible(kinds, r.n, r.arrays):
            return None
        check_kinds(list(kinds), r.arrays, r.n, r.names, r.loc)
        key = (tuple(kinds), backend.key())
        with BUILD_LOCK:
            if key not in self.pairs:
                self.pairs[key] = build_pair(self, list(kinds), backend)
        return self.pairs[key]

    def kinds(self, vals) -> List[str]:
        kinds = _kinds(vals, "prange loop")
        check_kinds(kinds, self.arrays, self.n, self.names, self.loc)
        return kinds

    def compiled(self, target: str, vals) -> _Compiled:
        kinds = self.kinds(vals)
        key = (tuple(kinds), target)
        c = self.cache.get(key)
        if c is None:
            c = self.cache[key] = build(self, kinds, target)
        return c

    @staticmethod
    def _threads(target: str) -> int:
        return numba.config.NUMBA_NUM_THREADS if backends.get(target).compiled else 1

    def forward(self, target: str, T, t0, s, *vals):
        c = self.compiled(target, vals)
        return c.fwd(max(int(T), 0), int(t0), *vals)

    def vjp(self, target: str, args, dz) -> list:
        T, t0 = max(int(args[0]), 0), int(args[1])
        vals = list(args[3:])
        c = self.compiled(target, vals)
        res = c.bwd(T, t0, *vals, np.asarray(dz, np.float64), self._threads(target))
        out: List[Any] = [None, None, None] + list(res[:self.n]) + [None] * (len(vals) - self.n)
        for k, j in enumerate(c.diff_free):
            out[3 + self.n + j] = res[self.n + k]
        return out

    def tangent(self, target: str, *ops_and_tangents):
        k = len(ops_and_tangents) // 2
        ops, tans = ops_and_tangents[:k], ops_and_tangents[k:]
        T, t0 = max(int(ops[0]), 0), int(ops[1])
        vals = list(ops[3:])
        tv = [float(x) if not isinstance(x, np.ndarray) else x for x in tans[3:]]
        kinds = self.kinds(vals)
        key = (tuple(kinds), target)
        f = self.tangents.get(key)
        if f is None:
            f = self.tangents[key] = build_tangent(self, kinds, target)
        return f(T, t0, *vals, *tv)

    def __call__(self, T, t0, s, *vals):
        """Plain Python semantics (kind inference and the python target's fallback)."""
        return self.forward("python", T, t0, s, *vals)

    def __repr__(self) -> str:
        return self.__name__


class _PartRunner(PartRunner):
    """Carried value ``k`` read out of the packed vector; an integer sum stays an integer."""

    def forward(self, target: str, z, *likes):
        v = likes[self.k]
        out = super().forward(target, z, *likes)
        if isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)):
            return int(round(out))
        return out


class PLoop(CkLoop):
    """A parallel loop: ``PLoop(runner)(T, t0, 0, *carried, *read)`` is the loop's final
    carried values packed into a float64 vector (its primal and tangent calls are those of a
    checkpointed loop: the runner's ``forward`` and ``tangent``)."""

    def __init__(self, runner: PRunner):
        super().__init__(runner)
        self.__name__ = self.__qualname__ = "prange loop"

    def written_operands(self, args) -> list:
        """The operands the loop writes (for zyg/safety.py): its written arrays."""
        return list(args[3:3 + self.fn.arrays])

    @staticmethod
    def part_of(fn) -> Optional[int]:
        """``k`` where ``fn`` reads carried value ``k`` out of a parallel loop's result
        (``PPart``), else None."""
        return fn.fn.k if isinstance(fn, PPart) else None

    def compiled_pair(self, kinds: List[str], backend, inplace) -> Optional[looppairs.LoopPair]:
        """The loop as a compiled pair for operand kinds ``kinds`` (carried, then read) on
        ``backend`` (``pullbacks/native.py``'s ``native_loop``), or None: the run-time path.
        ``inplace[k]``: carried value ``k`` is written back into its array after the loop
        (the lowering does so for every written array; the reductions are values)."""
        r = self.fn
        if tuple(inplace) != (True,) * r.arrays + (False,) * (r.n - r.arrays):
            return None
        return self.fn.pair(kinds, backend)

    def _zyg_kind(self, kinds):
        r = self.fn
        check_kinds(list(kinds[3:]), r.arrays, r.n, r.names, r.loc)
        return PACKED_KIND


class PPart(CkPart):
    """Carried value ``k`` of a parallel loop: ``PPart(k)(z, *carried_before)``."""

    def __init__(self, runner: Any):
        super().__init__(runner)
        self.__name__ = self.__qualname__ = f"prange loop value {runner.k}"

    def _zyg_kind(self, kinds):
        k = kinds[1 + self.fn.k]
        return k if k == "int" else super()._zyg_kind(kinds)


hooks.LOOPS[numba.prange] = hooks.LoopPrims(
    loop=lambda step, n, names, loc: PLoop(PRunner(step, n, names, loc)),
    part=lambda k: PPart(_PartRunner(k)),
    parallel=True)
