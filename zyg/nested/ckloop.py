"""Checkpointed loops: ``for t in zyg.checkpointed_range(T, snapshots=s)``.

The lowering (``Lowerer.checkpointed_loop`` in ``zyg/ssa/lower.py``) turns the loop's
body into a *step function* ``step(t, c_0, ..., c_n-1, f_0, ..., f_m-1)`` returning the
carried values ``c`` (the variables the body reads before assigning them, or that live
after the loop, and the arrays it writes into) from the values it only reads (``f``).
The loop itself becomes one call ``z = CkLoop(runner)(T, t0, s, c..., f...)`` returning
the final carried values packed into one float64 vector, and one ``CkPart(k)`` call per
carried value reading it back out.  Both are ``checkpoint``-like primitives, whose
forward and backward parts this module provides as compiled code:

* forward: ``T`` plain steps (the step's primal without a tape), nothing recorded;
* backward: binomial checkpointing (Griewank & Walther's Revolve schedule, computed on
  the fly): at most ``s`` packed states are held at once; a step is reversed by running
  it once more with its tape recorded and applying its adjoint at once, so the tape never
  holds more than one step.  A step runs forward at most ``r + 1`` times, where ``r`` is
  the smallest integer with ``C(s - 1 + r, r) >= T``.

The step is differentiated by zyg itself (``plan`` + ``emit_split``), per argument kinds
and target, and the schedule interpreter is generated code compiled with it.

In a gradient the loop is a compiled pair (:func:`build_pair`, ``looppairs.py``) that the
gradient's own code calls: the arrays the body only writes into are stepped in place and
restored by the pair's adjoint, which then runs the same schedule.  ``LoopRunner.forward``
and ``vjp`` (the loop as a function of values, called through Python) remain for forward
mode's plain parts, code that records nothing and ``ZYG_NATIVE_LOOPS=0``.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from .. import backends
from ..build import ForwardMode, Program, Split, build as build_program, load
from ..driver import _ident, _kinds, ssa_of
from ..errors import TypeMismatch
from ..rules.higher import Checkpointed, checkpointed_range
from ..ssa import hooks
from ..pullbacks import looppairs
from ..pullbacks.tape import grow
from .recursion import _python_call, call_helper
from ..pullbacks.transform import plan
from ..ssa.analysis import array_dtype, array_kind, differentiable, is_array, is_tuple

_FLOAT_ARRAYS = ("float64", "float32")


def carried_kind_error(kind: str, name: str, loc) -> TypeMismatch:
    return TypeMismatch(f"checkpointed loop: {name!r} is carried from one step to the next and is "
                        f"a {kind} value; carried values must be floats or float arrays",
                        loc.filename if loc else None, loc.lineno if loc else None,
                        loc.col if loc else None,
                        hint="unpack tuples into separate variables; compute integer counters from "
                             "the loop variable")


def check_kinds(carried: List[str], free: List[str], names: List[str], loc) -> None:
    n = len(carried)
    for k, nm in zip(carried, names[:n]):
        if k in ("float", "int"):
            continue
        if is_array(k) and array_dtype(k) in _FLOAT_ARRAYS:
            continue
        raise carried_kind_error(k, nm, loc)
    for k, nm in zip(free, names[n:]):
        if is_tuple(k):
            raise TypeMismatch(f"checkpointed loop: the body reads the tuple {nm!r}; unpack it into "
                               "separate variables before the loop",
                               loc.filename if loc else None, loc.lineno if loc else None,
                               loc.col if loc else None)


PACKED_KIND = array_kind(np.float64, 1)


def _no_hidden(ir, step) -> None:
    """The step's own arrays from closures and globals are passed to it as free values by
    the lowering; one read by a function the step calls is not (yet): say so."""
    if ir.reads.hidden:
        names = ", ".join(repr(s.name) for s in ir.reads.hidden)
        raise TypeMismatch(f"checkpointed loop: a function called in the loop body reads the "
                           f"array(s) {names} from a closure or a global; zyg cannot pass them "
                           f"into a checkpointed step yet", ir.filename, ir.firstlineno, None,
                           hint="read the array in the loop body itself, or pass it to the "
                                "function as an argument")


def part_kind(k: str) -> str:
    return "float" if k == "int" else k


def _kinds_of(vals) -> List[str]:
    return _kinds(vals, "checkpointed loop")


class _Compiled:
    """The compiled pieces of one loop at one set of argument kinds and one target."""

    def __init__(self, fwd, bwd, diff_free: List[int], kinds: List[str]):
        self.fwd = fwd
        self.bwd = bwd
        self.diff_free = diff_free
        self.kinds = kinds


def _pack_src(code: List[str], kinds: List[str], names: List[str], out: str, ind: str) -> None:
    """``out = one float64 vector of the values names`` (generated lines)."""
    size = " + ".join("1" if not is_array(k) else f"{nm}.size" for k, nm in zip(kinds, names))
    code.append(f"{ind}{out} = np.empty({size})")
    code.append(f"{ind}_o = 0")
    for k, nm in zip(kinds, names):
        if is_array(k):
            code.append(f"{ind}{out}[_o:_o + {nm}.size] = np.ascontiguousarray({nm}).reshape({nm}.size)")
            code.append(f"{ind}_o += {nm}.size")
        else:
            code.append(f"{ind}{out}[_o] = {nm}")
            code.append(f"{ind}_o += 1")


def _unpack_src(code: List[str], kinds: List[str], like: List[str], src: str, outs: List[str],
                ind: str) -> None:
    """``outs = fresh values read from the vector src``, shaped like ``like``."""
    code.append(f"{ind}_o = 0")
    for k, lk, o in zip(kinds, like, outs):
        if is_array(k):
            cast = ".copy()" if array_dtype(k) == "float64" else f".astype(np.{array_dtype(k)})"
            code.append(f"{ind}{o} = {src}[_o:_o + {lk}.size]{cast}.reshape({lk}.shape)")
            code.append(f"{ind}_o += {lk}.size")
        else:
            code.append(f"{ind}{o} = {src}[_o]")
            code.append(f"{ind}_o += 1")


def _tuple(names: List[str]) -> str:
    return "(" + "".join(n + ", " for n in names) + ")"


_SCHEDULE = '''
def _ck_beta(c, r, cap):
    """C(c + r, r): the number of steps c snapshots reverse with r repetitions (capped)."""
    v = 1
    for i in range(1, r + 1):
        v = v * (c + i) // i
        if v >= cap:
            return cap
    return v


def _ck_split(l, c):
    """Where to put the next snapshot in a range of l steps with c free snapshots."""
    r = 0
    while _ck_beta(c, r, l) < l:
        r += 1
    m = l - _ck_beta(c - 1, r, l)
    return m if m >= 1 else 1
'''


def build(step: Any, n: int, kinds: List[str], target: str) -> _Compiled:
    """Compile the loop with step function ``step`` (``n`` carried values) for operands of
    these kinds (the carried values, then the values the body only reads)."""
    backend = backends.get(target)
    src, glob, diff_free, rec = _loop_source(step, n, kinds, backend)
    name = f"<zyg checkpointed loop {_ident(ssa_of(step).name)}>"
    exec(compile(src, name, "exec"), glob)
    fwd, bwd = glob["_ck_fwd"], glob["_ck_bwd"]
    for h in ("_ck_beta", "_ck_split"):
        glob[h] = backend.jit(glob[h])
    fwd, bwd = backend.jit(fwd), backend.jit(bwd)
    out = _Compiled(fwd, bwd, diff_free, kinds)
    out.source = src
    out.rec = rec
    return out


def _loop_source(step: Any, n: int, kinds: List[str], backend):
    """The source of ``_ck_fwd(T, t0, *carried, *read) -> packed final carried values`` and
    ``_ck_bwd(T, t0, s, *carried, *read, dz) -> (*cotangents of carried, *of the
    differentiable read values, forward steps run)``, the globals it needs (the step's
    compiled parts), the read values' differentiable positions and the recorded step."""
    ir = ssa_of(step)
    _no_hidden(ir, step)
    skinds = ["int"] + list(kinds)
    m = len(kinds) - n
    stem = _ident(ir.name)
    # the plain step (nothing differentiated: its tape is empty but for control flow)
    p0 = plan(ir, skinds, [], backend)
    (run,) = build_program(Split(adjoint=False), p0, stem + "_run").fns
    # the recorded step and its adjoint
    diff = [i for i, k in enumerate(skinds) if differentiable(k)]
    p1 = plan(ir, skinds, diff, backend)
    rec, adj = build_program(Split(), p1, stem + "_rev").fns
    cn = [f"c{i}" for i in range(n)]
    fn_ = [f"f{j}" for j in range(m)]
    ck, fk = kinds[:n], kinds[n:]
    diff_free = [j for j in range(m) if differentiable(fk[j])]
    # position of each differentiable parameter's cotangent in the adjoint's result
    slot = {i - 1: s for s, i in enumerate(diff)}      # operand index (without t) -> slot
    args = ", ".join(["{t}"] + cn + fn_)
    lines: List[str] = []
    # -- forward: T plain steps
    lines.append(f"def _ck_fwd(T, t0, {', '.join(cn + fn_)}):")
    for k, c in zip(ck, cn):
        if is_array(k):
            lines.append(f"    {c} = {c}.copy()")
    lines.append("    for _k in range(T):")
    lines.append(f"        _r, _tp = _ck_run({args.format(t='t0 + _k')})")
    lines.append(f"        {', '.join(cn)}{',' if n == 1 else ''} = {'(_r,)' if n == 1 else '_r'}")
    _pack_src(lines, ck, cn, "_z", "    ")
    lines.append("    return _z")
    lines.append("")
    # -- backward: the binomial schedule, interpreted with an explicit stack
    xs = [f"x{i}" for i in range(n)]
    ds = [f"d{i}" for i in range(n)]
    gs = [f"g{j}" for j in diff_free]
    lines.append(f"def _ck_bwd(T, t0, s, {', '.join(cn + fn_)}, dz):")
    lines.append("    _snap = np.empty((s, dz.shape[0]))")
    _pack_src(lines, ck, cn, "_z0", "    ")
    lines.append("    _snap[0, :] = _z0")
    _unpack_src(lines, ck, cn, "dz", ds, "    ")
    for j in diff_free:
        lines.append(f"    g{j} = np.zeros_like(f{j})" if is_array(fk[j]) else f"    g{j} = 0.0 * f{j}")
    lines.append("    _sa = np.empty(s + 4, np.int64)")
    lines.append("    _sb = np.empty(s + 4, np.int64)")
    lines.append("    _ss = np.empty(s + 4, np.int64)")
    lines.append("    _sc = np.empty(s + 4, np.int64)")
    lines.append("    _sa[0] = 0")
    lines.append("    _sb[0] = T")
    lines.append("    _ss[0] = 0")
    lines.append("    _sc[0] = s - 1")
    lines.append("    _sp = 1")
    lines.append("    _nfw = 0")
    lines.append("    while _sp > 0:")
    lines.append("        _sp -= 1")
    lines.append("        _a = _sa[_sp]")
    lines.append("        _b = _sb[_sp]")
    lines.append("        _slot = _ss[_sp]")
    lines.append("        _c = _sc[_sp]")
    lines.append("        if _b - _a <= 0:")
    lines.append("            continue")
    _unpack_src(lines, ck, cn, "_snap[_slot]", xs, "        ")
    xargs = ", ".join(["{t}"] + xs + fn_)
    step_back = f"{', '.join(xs)}{',' if n == 1 else ''} = {'(_r,)' if n == 1 else '_r'}"
    lines.append("        if _c == 0 or _b - _a == 1:")
    lines.append("            for _k in range(_a, _b - 1):")
    lines.append(f"                _r, _tp = _ck_run({xargs.format(t='t0 + _k')})")
    lines.append(f"                {step_back}")
    lines.append("            _r, _tp = _ck_rec(" + xargs.format(t="t0 + _b - 1") + ")")
    dy = ds[0] if n == 1 else _tuple(ds)
    lines.append(f"            _g = _ck_adj(*_tp, {dy})")
    for i in range(n):
        lines.append(f"            d{i} = _g[{slot[i]}]")
    for j in diff_free:
        lines.append(f"            g{j} += _g[{slot[n + j]}]")
    lines.append("            _nfw += _b - _a")
    lines.append("            _sa[_sp] = _a")
    lines.append("            _sb[_sp] = _b - 1")
    lines.append("            _ss[_sp] = _slot")
    lines.append("            _sc[_sp] = _c")
    lines.append("            _sp += 1")
    lines.append("        else:")
    lines.append("            _m = _a + _ck_split(_b - _a, _c)")
    lines.append("            for _k in range(_a, _m):")
    lines.append(f"                _r, _tp = _ck_run({xargs.format(t='t0 + _k')})")
    lines.append(f"                {step_back}")
    lines.append("            _nfw += _m - _a")
    _pack_src(lines, ck, xs, "_zm", "            ")
    lines.append("            _snap[_slot + 1, :] = _zm")
    lines.append("            _sa[_sp] = _a")
    lines.append("            _sb[_sp] = _m")
    lines.append("            _ss[_sp] = _slot")
    lines.append("            _sc[_sp] = _c")
    lines.append("            _sa[_sp + 1] = _m")
    lines.append("            _sb[_sp + 1] = _b")
    lines.append("            _ss[_sp + 1] = _slot + 1")
    lines.append("            _sc[_sp + 1] = _c - 1")
    lines.append("            _sp += 2")
    lines.append(f"    return {_tuple(ds + gs + ['_nfw'])}")
    src = _SCHEDULE + "\n\n" + "\n".join(lines) + "\n"
    glob = {"np": np, "_ck_run": run, "_ck_rec": rec, "_ck_adj": adj}
    return src, glob, diff_free, rec


def build_tangent(step: Any, n: int, kinds: List[str], target: str):
    """``_ck_tan(T, t0, *carried, *read, *their tangents)``: the packed tangent of the
    carried values after ``T`` steps of the step's forward mode."""
    ir = ssa_of(step)
    _no_hidden(ir, step)
    skinds = ["int"] + list(kinds)
    stem = _ident(ir.name) + "_tan"
    backend = backends.get(target)
    p = plan(ir, skinds, [i for i, k in enumerate(skinds) if differentiable(k)], backend)
    built = build_program(ForwardMode(), p, stem)
    (jf,), fwd = built.fns, built.info
    m = len(kinds) - n
    cn = [f"c{i}" for i in range(n)]
    fn_ = [f"f{j}" for j in range(m)]
    tcn = [f"tc{i}" for i in range(n)]
    tfn = [f"tf{j}" for j in range(m)]
    tnames = [None] + tcn + tfn
    act = [tnames[i] for i, q in enumerate(p.fn.params) if fwd.active(q)]
    lines = [f"def _ck_tan(T, t0, {', '.join(cn + fn_ + tcn + tfn)}):"]
    for k, c, tc in zip(kinds[:n], cn, tcn):
        if is_array(k):
            lines.append(f"    {c} = {c}.copy()")
            lines.append(f"    {tc} = {tc}.copy()")
    lines.append("    for _k in range(T):")
    call = ", ".join(["t0 + _k"] + cn + fn_ + act)
    lines.append(f"        _r, _tr = _ck_jvp({call})")
    lines.append(f"        {', '.join(cn)}{',' if n == 1 else ''} = {'(_r,)' if n == 1 else '_r'}")
    lines.append(f"        {', '.join(tcn)}{',' if n == 1 else ''} = {'(_tr,)' if n == 1 else '_tr'}")
    _pack_src(lines, kinds[:n], tcn, "_z", "    ")
    lines.append("    return _z")
    src = "\n".join(lines) + "\n"
    glob = {"np": np, "_ck_jvp": jf}
    exec(compile(src, f"<zyg checkpointed loop {stem}>", "exec"), glob)
    f = glob["_ck_tan"]
    f = backend.jit(f)
    return f


# -- the loop as a compiled pair (looppairs.py) ------------------------------------------------

def pair_possible(kinds: List[str], n: int) -> bool:
    """The carried values are numbers and float arrays (``check_kinds``); the read ones
    must be what a pair takes (``looppairs.operands_ok``)."""
    return looppairs.operands_ok(kinds)


def build_pair(runner: "LoopRunner", kinds: List[str], inplace: Tuple[bool, ...], backend) \
        -> looppairs.LoopPair:
    """``rp``/``ra`` (``looppairs.py``) around ``_ck_fwd``/``_ck_bwd``: the in-place arrays
    (written back after the loop) are stepped in place and restored by ``ra`` before the
    checkpointed reverse; the other carried values are the values."""
    n = runner.n
    norm = ["float" if k == "int" else k for k in kinds[:n]] + list(kinds[n:])   # _norm
    src, glob, diff_free, _ = _loop_source(runner.step, n, norm, backend)
    ck = norm[:n]
    m = len(kinds) - n
    cn = [f"c{i}" for i in range(n)]
    fn_ = [f"f{j}" for j in range(m)]
    values = [k for k in range(n) if not inplace[k]]
    scalar_diff, array_diff = looppairs.positions(kinds)
    stem = _ident(ssa_of(runner.step).name) + "_ck"
    stacks = looppairs.stack_params()
    ops_all = ["T", "t0", "s"] + cn + fn_
    sh = {q - 3: f"sh{q - 3}" for q in array_diff}
    dv = [f"dv{k}" for k in values]
    step_args = ", ".join(["t0 + _k"] + cn + fn_)
    lines: List[str] = ["", ""]
    # -- the forward steps, in place for the in-place arrays; the values packed
    lines.append(f"def {stem}_fwd(T, t0, {', '.join(cn + fn_)}):")
    for k in values:
        if is_array(ck[k]):
            lines.append(f"    c{k} = c{k}.copy()")
    lines.append("    for _k in range(T):")
    lines.append(f"        _r, _tp = _ck_run({step_args})")
    lines.append(f"        {', '.join(cn)}{',' if n == 1 else ''} = {'(_r,)' if n == 1 else '_r'}")
    if values:
        _pack_src(lines, [ck[k] for k in values], [cn[k] for k in values], "_z", "    ")
    else:
        lines.append("    _z = np.empty(0)")
    lines.append("    return _z")
    lines.append("")
    lines.append(f"def {stem}_rp({', '.join(ops_all)}, _lim, {', '.join(stacks)}):")
    for k in range(n):
        if kinds[k] == "int":
            lines.append(f"    c{k} = float(c{k})")
    ipa = [k for k in range(n) if inplace[k]]
    looppairs.save_arrays(lines, [ck[k] for k in ipa], [cn[k] for k in ipa], "range")
    lines.append(f"    _z = {stem}_fwd(T, t0, {', '.join(cn + fn_)})")
    lines.append(f"    return (_z, {', '.join(stacks)})")
    lines.append("")
    lines.append(f"def {stem}_ra({', '.join(ops_all + list(sh.values()) + dv)}, _lim, {', '.join(stacks)}):")
    lines.append("    if s < 1:")
    lines.append("        raise ValueError('checkpointed_range: snapshots must be at least 1')")
    for k in range(n):
        if kinds[k] == "int":
            lines.append(f"    c{k} = float(c{k})")
    looppairs.restore_arrays(lines, [ck[k] for k in ipa], [cn[k] for k in ipa], "range")
    # the cotangents of the final carried values, packed as _ck_bwd takes them
    size = " + ".join(f"c{k}.size" if is_array(ck[k]) else "1" for k in range(n))
    lines.append(f"    _dz = np.zeros({size})")
    lines.append("    _o = 0")
    for k in range(n):
        if is_array(ck[k]):
            got = sh.get(k) if inplace[k] else f"dv{k}"
            if got is not None:
                lines.append(f"    _dz[_o:_o + c{k}.size] = np.ascontiguousarray({got}).reshape(c{k}.size)")
            lines.append(f"    _o += c{k}.size")
        else:
            if not inplace[k]:
                lines.append(f"    _dz[_o] = dv{k}")
            lines.append("    _o += 1")
    lines.append(f"    _res = _ck_bwd(T, t0, s, {', '.join(cn + fn_)}, _dz)")
    outs = []
    for k in range(n):
        if k in sh:
            lines.append(f"    {sh[k]}[...] = _res[{k}]" if inplace[k] else f"    {sh[k]} += _res[{k}]")
        elif 3 + k in scalar_diff:
            outs.append(f"_res[{k}]")
    for idx, j in enumerate(diff_free):
        if n + j in sh:
            lines.append(f"    {sh[n + j]} += _res[{n + idx}]")
        elif 3 + n + j in scalar_diff:
            outs.append(f"_res[{n + idx}]")
    assert len(outs) == len(scalar_diff), (outs, scalar_diff)
    lines.append(f"    return {_tuple(outs + looppairs.tops())}")
    text = src + "\n".join(lines) + "\n"
    code = looppairs.typed_code(text)
    glob.update({"_pl_grow": backend.helper(grow)})
    names = ["_ck_beta", "_ck_split", "_ck_fwd", "_ck_bwd", stem + "_fwd", stem + "_rp", stem + "_ra"]
    loaded = load(Program(code, glob, names, stem), backend).fns
    return looppairs.LoopPair(loaded[5], loaded[6], scalar_diff, array_diff, values, loaded[4],
                              loaded[3], text)


class LoopRunner:
    """The run-time side of one checkpointed loop: its step function, compiled per kinds."""
    _zyg_runner = True

    def __init__(self, step: Any, n: int, names: List[str], loc):
        self.step = step
        self.n = n
        self.names = names
        self.loc = loc
        self.cache: Dict[Tuple[Tuple[str, ...], str], _Compiled] = {}
        self.tangents: Dict[Tuple[Tuple[str, ...], str], Any] = {}
        self.pairs: Dict[Any, Optional[looppairs.LoopPair]] = {}
        self.helpers: Dict[Any, Any] = {}       # compiled calls from forward-mode code
        self.__name__ = f"checkpointed_loop_{getattr(step, '__name__', 'step')}"
        self.last_forward_steps = 0     # steps run by the last backward pass (a measurement)

    def _norm(self, vals) -> list:
        # integer carried values are carried as floats (acc = 0 ... acc += x)
        return [float(v) if isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))
                else v for v in vals]

    def pair(self, kinds: List[str], inplace: Tuple[bool, ...], backend) -> Optional[looppairs.LoopPair]:
        """The loop as a compiled pair (``looppairs.py``), or None where its kinds rule one
        out (the run-time path)."""
        if not pair_possible(list(kinds), self.n):
            return None
        check_kinds(list(kinds[:self.n]), list(kinds[self.n:]), self.names, self.loc)
        from ..caches import BUILD_LOCK
        key = (tuple(kinds), tuple(inplace), backend.key())
        with BUILD_LOCK:
            if key not in self.pairs:
                self.pairs[key] = build_pair(self, list(kinds), tuple(inplace), backend)
        return self.pairs[key]

    def compiled(self, target: str, vals) -> _Compiled:
        kinds = _kinds_of(vals)
        key = (tuple(kinds), target)
        c = self.cache.get(key)
        if c is None:
            check_kinds(kinds[:self.n], kinds[self.n:], self.names, self.loc)
            c = self.cache[key] = build(self.step, self.n, kinds, target)
        return c

    def forward(self, target: str, T, t0, s, *vals):
        vals = self._norm(vals[:self.n]) + list(vals[self.n:])
        c = self.compiled(target, vals)
        return c.fwd(int(T), int(t0), *vals)

    def vjp(self, target: str, args, dz) -> list:
        T, t0, s = int(args[0]), int(args[1]), int(args[2])
        vals = self._norm(args[3:3 + self.n]) + list(args[3 + self.n:])
        if s < 1:
            raise ValueError(f"checkpointed_range: snapshots must be at least 1 (got {s})")
        c = self.compiled(target, vals)
        if T <= 0:
            out = [None, None, None] + [np.zeros_like(v) if isinstance(v, np.ndarray) else 0.0
                                        for v in vals]
            dvals = self._unpack(np.asarray(dz, np.float64), vals[:self.n])
            for i in range(self.n):
                out[3 + i] = dvals[i]
            return out
        res = c.bwd(T, t0, s, *vals, np.asarray(dz, np.float64))
        self.last_forward_steps = int(res[-1])
        out: List[Any] = [None, None, None] + list(res[:self.n]) + [None] * (len(vals) - self.n)
        for k, j in enumerate(c.diff_free):
            out[3 + self.n + j] = res[self.n + k]
        return out

    def step_tape_bytes(self, target: str, T, t0, s, *vals) -> int:
        """The size of one step's tape (what the backward pass records at a time), measured
        by running the recorded step once from the loop's initial state."""
        vals = self._norm(vals[:self.n]) + list(vals[self.n:])
        c = self.compiled(target, vals)
        args = [v.copy() if isinstance(v, np.ndarray) else v for v in vals]
        _, tape = c.rec(int(t0), *args)
        # the tape's own buffers: not the step's arguments, which it only refers to
        own = [x for x in tape if isinstance(x, np.ndarray)
               and not any(isinstance(v, np.ndarray) and np.shares_memory(x, v) for v in args)]
        return int(sum(x.nbytes for x in own))

    def tangent(self, target: str, *ops_and_tangents):
        """Forward mode: the packed tangent of the final carried values (``T`` steps of the
        step's jvp; forward mode needs no tape, so nothing is checkpointed)."""
        k = len(ops_and_tangents) // 2
        ops, tans = ops_and_tangents[:k], ops_and_tangents[k:]
        T, t0 = int(ops[0]), int(ops[1])
        vals = self._norm(ops[3:3 + self.n]) + list(ops[3 + self.n:])
        tv = [float(x) if not isinstance(x, np.ndarray) else x for x in tans[3:]]
        kinds = _kinds_of(vals)
        key = (tuple(kinds), target)
        f = self.tangents.get(key)
        if f is None:
            check_kinds(kinds[:self.n], kinds[self.n:], self.names, self.loc)
            f = self.tangents[key] = build_tangent(self.step, self.n, kinds, target)
        return f(max(T, 0), t0, *vals, *tv)

    @staticmethod
    def _unpack(z, likes) -> list:
        out, o = [], 0
        for v in likes:
            if isinstance(v, np.ndarray):
                out.append(z[o:o + v.size].astype(v.dtype).reshape(v.shape))
                o += v.size
            else:
                out.append(float(z[o]))
                o += 1
        return out

    def __call__(self, T, t0, s, *vals):
        """Plain Python semantics (kind inference and the python target's fallback)."""
        return self.forward("python", T, t0, s, *vals)

    def __repr__(self) -> str:
        return self.__name__


class PartRunner:
    """Carried value ``k`` read out of the packed final state (a copy, shaped like the value
    before the loop; integers come back as floats)."""
    _zyg_runner = True

    def __init__(self, k: int):
        self.k = k
        self.__name__ = f"checkpointed_part{k}"

    def _range(self, likes) -> Tuple[int, int]:
        o = 0
        for v in likes[:self.k]:
            o += v.size if isinstance(v, np.ndarray) else 1
        v = likes[self.k]
        return o, o + (v.size if isinstance(v, np.ndarray) else 1)

    def forward(self, target: str, z, *likes):
        a, b = self._range(likes)
        v = likes[self.k]
        if isinstance(v, np.ndarray):
            return z[a:b].astype(v.dtype).reshape(v.shape)
        return float(z[a])

    def vjp(self, target: str, args, dy) -> list:
        z, likes = args[0], args[1:]
        a, b = self._range(likes)
        dz = np.zeros(z.shape[0])
        dz[a:b] = np.ravel(dy)
        return [dz] + [np.zeros_like(v) if isinstance(v, np.ndarray) else 0.0 for v in likes]

    def __call__(self, z, *likes):
        return self.forward("python", z, *likes)

    def __repr__(self) -> str:
        return self.__name__


# -- the primitives the front end emits for a checkpointed_range loop ---------------------

class CkLoop(Checkpointed):
    """A checkpointed loop: ``CkLoop(runner)(T, t0, s, *carried, *read)`` is the loop's final
    carried values packed into a float64 vector (``zyg/nested/ckloop.py``)."""

    def __init__(self, runner: Any):
        super().__init__(runner)
        self.__name__ = self.__qualname__ = "checkpointed_range loop"

    def primal_src(self, em, st, args) -> str:
        return _runner_call(em, st, args, self.fn)

    def tangent_src(self, em, st, args) -> str:
        """Forward mode: the step's jvp run T times (no checkpointing is needed)."""
        kinds = [em.kind(a) for a in st.expr.args]
        key = ("tangent", tuple(kinds), em.p.target)
        h = self.fn.helpers.get(key)
        if h is None:
            n = len(kinds)
            params = [f"a{i}" for i in range(2 * n)]
            h = self.fn.helpers[key] = _python_call(
                "ckpt_tangent", params, f"_zyg_r.tangent({em.p.target!r}, {', '.join(params)})",
                PACKED_KIND, {"_zyg_r": self.fn}, em.p.target)
        return f"{em.ns.ref(h)}({', '.join(args + [em.tz(a) for a in st.expr.args])})"

    def written_operands(self, args) -> list:
        """The operands the loop may write (for zyg/safety.py): its carried arrays."""
        return list(args[3:3 + self.fn.n])

    @staticmethod
    def part_of(fn) -> Optional[int]:
        """``k`` where ``fn`` reads carried value ``k`` out of the loop's result."""
        return fn.fn.k if type(fn) is CkPart else None

    def compiled_pair(self, kinds: List[str], backend, inplace) -> Optional[looppairs.LoopPair]:
        """The loop as a compiled pair (``pullbacks/native.py``'s ``native_loop``), or None."""
        return self.fn.pair(kinds, tuple(inplace), backend)

    def _zyg_kind(self, kinds):
        r = self.fn
        check_kinds(list(kinds[3:3 + r.n]), list(kinds[3 + r.n:]), r.names, r.loc)
        return PACKED_KIND


class CkPart(Checkpointed):
    """Carried value ``k`` of a checkpointed loop, read from the packed vector:
    ``CkPart(k)(z, *carried_before)``."""

    def __init__(self, runner: Any):
        super().__init__(runner)
        self.__name__ = self.__qualname__ = f"checkpointed_range value {runner.k}"

    def primal_src(self, em, st, args) -> str:
        return _runner_call(em, st, args, self.fn)

    def tangent_src(self, em, st, args) -> str:
        """Linear in the packed vector: the same read-out of its tangent."""
        return _runner_call(em, st, [em.tz(st.expr.args[0])] + args[1:], self.fn)

    def written_operands(self, args) -> None:
        """A read-out writes nothing (for zyg/safety.py)."""
        return None

    def _zyg_kind(self, kinds):
        return part_kind(kinds[1 + self.fn.k])


def _runner_call(em, st, args, runner) -> str:
    """A call of a checkpointed loop's run-time part from forward-mode code."""
    h = call_helper(runner, [em.kind(a) for a in st.expr.args], em.kind(st.var), em.p.target,
                    record=False)
    return f"{em.ns.ref(h)}({', '.join(args)})"


hooks.LOOPS[checkpointed_range] = hooks.LoopPrims(
    loop=lambda step, n, names, loc: CkLoop(LoopRunner(step, n, names, loc)),
    part=lambda k: CkPart(PartRunner(k)))
