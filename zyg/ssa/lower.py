"""Lower a Python function (parsed with gast) straight to SSA with block arguments.

The construction is Braun et al. (CC 2013), "Simple and Efficient Construction of
SSA Form": variables are looked up per block, blocks are *sealed* once all their
predecessors are known, and reads in unsealed blocks create incomplete block
parameters that are completed on sealing.  Block parameters play the role of phi
nodes.  Trivial parameters are removed afterwards by a pass (``passes.py``).

Desugaring happens on the way: ``elif``, augmented assignment, literal tuple
unpacking, chained comparisons, ``and``/``or``/``not`` (short-circuit branches),
``x if c else y``, ``for ... in range(...)`` (counted loops), ``break``,
``continue`` and ``return`` anywhere (one exit block).
"""
from __future__ import annotations

import builtins
import inspect
import math
import operator
import sys
import textwrap
import types
from typing import Any, Dict, List, Optional, Set

import gast

from ..errors import UnsupportedSyntax
from .ir import Block, Branch, Call, Const, Function, Jump, Loc, Operand, Return, Stmt, Undef, Var
from .prims import ArrayOf, Attr, GetItem, InPlace, MakeTuple, SetItem, Stacked

import numpy as np

# array methods, lowered to calls of the numpy function of the same meaning
_METHODS = {
    "copy": np.copy, "sum": np.sum, "mean": np.mean, "prod": np.prod, "max": np.max,
    "min": np.min, "argmax": np.argmax, "argmin": np.argmin, "dot": np.dot,
    "cumsum": np.cumsum, "transpose": np.transpose, "ravel": np.ravel, "flatten": np.ravel,
    "reshape": np.reshape, "clip": np.clip,
}
_ATTRS = ("shape", "size", "ndim", "T", "real", "imag")

_BINOPS = {
    gast.Add: operator.add, gast.Sub: operator.sub, gast.Mult: operator.mul,
    gast.Div: operator.truediv, gast.FloorDiv: operator.floordiv,
    gast.Mod: operator.mod, gast.Pow: operator.pow, gast.MatMult: operator.matmul,
}
_CMPOPS = {
    gast.Lt: operator.lt, gast.LtE: operator.le, gast.Gt: operator.gt,
    gast.GtE: operator.ge, gast.Eq: operator.eq, gast.NotEq: operator.ne,
}
_UNARY = {gast.USub: operator.neg, gast.UAdd: operator.pos, gast.Not: operator.not_}

_UNSUPPORTED_STMT_HINTS = {
    "Try": "exceptions cannot be differentiated; move the try/except outside the function",
    "With": "context managers are not supported inside differentiated code",
    "AsyncWith": "async code is not supported",
    "AsyncFor": "async code is not supported",
    "AsyncFunctionDef": "async code is not supported",
    "Global": "differentiated functions may read globals (frozen at compile time) but not write them",
    "Nonlocal": "differentiated functions may not write variables of an enclosing function",
    "ClassDef": "define classes outside the differentiated function",
    "Delete": "'del' is not supported; just stop using the variable",
    "Import": "import modules at module level, outside the differentiated function",
    "ImportFrom": "import modules at module level, outside the differentiated function",
    "Raise": "raising exceptions is not supported in differentiated code",
    "Assert": "assertions are not supported in differentiated code; check before calling",
    "FunctionDef": "nested function definitions are not supported yet; define the helper at module level",
}
_UNSUPPORTED_EXPR_HINTS = {
    "Yield": "generators cannot be differentiated",
    "YieldFrom": "generators cannot be differentiated",
    "Await": "async code is not supported",
    "Lambda": "lambdas inside differentiated code are not supported yet; define the helper at module level",
    "ListComp": "comprehensions are not supported; write an explicit loop",
    "SetComp": "comprehensions are not supported; write an explicit loop",
    "DictComp": "comprehensions are not supported; write an explicit loop",
    "GeneratorExp": "generator expressions are not supported; write an explicit loop",
    "List": "lists are only supported as np.array([x, y, ...]) of numbers",
    "Dict": "dicts are not supported",
    "Set": "sets are not supported",
    "Starred": "'*' unpacking is not supported",
    "JoinedStr": "strings are not supported in differentiated code",
    "NamedExpr": "':=' is not supported; use a separate assignment",
}


def range_cond(i, stop, step):
    """Loop condition of ``range`` with a step whose sign is only known at run time."""
    return i < stop if step > 0 else i > stop


def unwrap(fn: Any) -> Any:
    """The plain Python function behind a numba dispatcher or ``functools.wraps`` wrapper."""
    seen = 0
    while seen < 20:
        seen += 1
        if hasattr(fn, "_zyg"):
            raise UnsupportedSyntax(
                f"{getattr(fn, '__name__', 'this function')} is already a zyg transform "
                "(grad/value_and_grad); nested derivatives are not supported yet",
                hint="differentiate the original function; higher-order AD is on the roadmap")
        if hasattr(fn, "py_func"):
            fn = fn.py_func
        elif hasattr(fn, "__wrapped__"):
            fn = fn.__wrapped__
        else:
            break
    return fn


class _Source:
    """The parsed source of a function, with the offsets mapping it to the file."""

    def __init__(self, fn):
        self.fn = fn
        code = fn.__code__
        self.filename = code.co_filename
        try:
            lines, start = inspect.getsourcelines(fn)
        except (OSError, TypeError) as e:
            raise UnsupportedSyntax(
                f"cannot read the source of {fn.__qualname__!r}: {e}",
                self.filename, code.co_firstlineno, None,
                "zyg transforms source code: define the function in a file or a notebook cell") from None
        src = "".join(lines)
        dedented = textwrap.dedent(src)
        first = lines[0]
        self.coloff = len(first) - len(first.lstrip()) if dedented != src else 0
        self.lineoff = max(start, 1) - 1
        self.node = self._find_def(dedented, fn)

    def _find_def(self, src: str, fn) -> Any:
        try:
            tree = gast.parse(src)
        except SyntaxError:
            # a lambda in the middle of a multi-line expression: parse the line alone
            tree = None
            for candidate in ("(" + src.strip().rstrip(",") + ")", src.strip().split("=", 1)[-1]):
                try:
                    tree = gast.parse(textwrap.dedent(candidate))
                    break
                except SyntaxError:
                    continue
            if tree is None:
                raise UnsupportedSyntax(f"cannot parse the source of {fn.__qualname__!r}",
                                        self.filename, fn.__code__.co_firstlineno)
        name = fn.__name__
        argnames = list(fn.__code__.co_varnames[:fn.__code__.co_argcount])
        found = []
        for node in gast.walk(tree):
            if isinstance(node, gast.FunctionDef) and node.name == name:
                found.append(node)
            elif isinstance(node, gast.Lambda) and name == "<lambda>":
                if [a.id for a in node.args.args] == argnames:
                    found.append(node)
        if not found:
            raise UnsupportedSyntax(f"cannot find the definition of {fn.__qualname__!r} in its source",
                                    self.filename, fn.__code__.co_firstlineno)
        if len(found) > 1 and name == "<lambda>":
            raise UnsupportedSyntax("several lambdas with the same arguments on one line; "
                                    "zyg cannot tell which one to differentiate",
                                    self.filename, fn.__code__.co_firstlineno,
                                    hint="give the function a name with 'def'")
        return found[0]

    def loc(self, node) -> Loc:
        ln = getattr(node, "lineno", None) or 1
        col = getattr(node, "col_offset", 0) or 0
        return Loc(self.filename, ln + self.lineoff, col + self.coloff)


class _Loop:
    def __init__(self, cont: int, exit: int):
        self.cont = cont
        self.exit = exit


class Lowerer:
    """Builds a :class:`Function` from a Python function's source."""

    def __init__(self, pyfn: Any):
        self.pyfn = unwrap(pyfn)
        if not isinstance(self.pyfn, types.FunctionType):
            raise UnsupportedSyntax(f"zyg can only transform Python functions, not {type(pyfn).__name__}")
        self.src = _Source(self.pyfn)
        self.globals = self.pyfn.__globals__
        code = self.pyfn.__code__
        self.closure = {}
        if self.pyfn.__closure__:
            for name, cell in zip(code.co_freevars, self.pyfn.__closure__):
                try:
                    self.closure[name] = cell.cell_contents
                except ValueError:
                    pass
        self.nvar = 0
        self.nblock = 0
        self.blocks: Dict[int, Block] = {}
        self.order: List[int] = []
        self.preds: Dict[int, List[int]] = {}
        self.defs: Dict[int, Dict[str, Operand]] = {}
        self.sealed: Set[int] = set()
        self.incomplete: Dict[int, Dict[str, Var]] = {}
        self.incoming: Dict[int, List[Operand]] = {}   # param id -> operand per pred edge
        self.param_block: Dict[int, int] = {}
        self.loops: List[_Loop] = []
        self.cur: Optional[int] = None
        self.nsynth = 0

    # -- errors ---------------------------------------------------------------
    def unsupported(self, node, msg: str, hint: Optional[str] = None) -> UnsupportedSyntax:
        loc = self.src.loc(node)
        return UnsupportedSyntax(msg, loc.filename, loc.lineno, loc.col, hint)

    # -- blocks and variables (Braun et al.) ------------------------------------
    def new_block(self, node=None) -> int:
        self.nblock += 1
        b = self.nblock
        self.blocks[b] = Block(b, loc=self.src.loc(node) if node is not None else None)
        self.order.append(b)
        self.preds[b] = []
        self.defs[b] = {}
        self.incomplete[b] = {}
        return b

    def new_var(self, hint: str = "") -> Var:
        self.nvar += 1
        return Var(self.nvar, hint)

    def new_param(self, b: int, hint: str) -> Var:
        p = self.new_var(hint)
        self.blocks[b].params.append(p)
        self.incoming[p.id] = []
        self.param_block[p.id] = b
        return p

    def write(self, name: str, b: int, value: Operand) -> None:
        self.defs[b][name] = value

    def read(self, name: str, b: int) -> Operand:
        d = self.defs[b]
        if name in d:
            return d[name]
        return self._read_recursive(name, b)

    def _read_recursive(self, name: str, b: int) -> Operand:
        if b not in self.sealed:
            val: Operand = self.new_param(b, name)
            self.incomplete[b][name] = val
        elif len(self.preds[b]) == 1:
            val = self.read(name, self.preds[b][0])
        elif not self.preds[b]:
            val = Undef()
        else:
            val = self.new_param(b, name)
            self.write(name, b, val)
            self._add_operands(name, val, b)
        self.write(name, b, val)
        return val

    def _add_operands(self, name: str, param: Var, b: int) -> None:
        for p in self.preds[b]:
            self.incoming[param.id].append(self.read(name, p))

    def seal(self, b: int) -> None:
        for name, param in list(self.incomplete[b].items()):
            self._add_operands(name, param, b)
        self.incomplete[b] = {}
        self.sealed.add(b)

    def emit(self, fn: Any, args: List[Operand], node, hint: str = "",
             kwargs: Optional[Dict[str, Operand]] = None) -> Var:
        v = self.new_var(hint)
        self.blocks[self.cur].stmts.append(Stmt(v, Call(fn, list(args), kwargs or {}), self.src.loc(node)))
        return v

    def jump(self, target: int) -> None:
        self.blocks[self.cur].term = Jump(target, [])
        self.preds[target].append(self.cur)
        self.cur = None

    def branch(self, cond: Operand, t: int, f: int) -> None:
        assert t != f
        self.blocks[self.cur].term = Branch(cond, t, [], f, [])
        self.preds[t].append(self.cur)
        self.preds[f].append(self.cur)
        self.cur = None

    def synth(self, prefix: str) -> str:
        self.nsynth += 1
        return f".{prefix}{self.nsynth}"

    # -- entry point --------------------------------------------------------------
    def lower(self) -> Function:
        old = sys.getrecursionlimit()
        sys.setrecursionlimit(max(old, 20000))
        try:
            return self._lower()
        finally:
            sys.setrecursionlimit(old)

    def _lower(self) -> Function:
        node = self.src.node
        args = node.args
        for bad, what in ((args.vararg, "*args"), (args.kwarg, "**kwargs")):
            if bad is not None:
                raise self.unsupported(node, f"{what} parameters are not supported")
        if args.kwonlyargs:
            raise self.unsupported(node, "keyword-only parameters are not supported")
        argnames = [a.id for a in args.posonlyargs + args.args]
        entry = self.new_block(node)
        self.sealed.add(entry)
        for name in argnames:
            p = self.new_param(entry, name)
            self.write(name, entry, p)
        self.locals = set(argnames) | self._assigned_names(node)
        self.exit = self.new_block(node)
        self.cur = entry
        if isinstance(node, gast.Lambda):
            v = self.expr(node.body)
            self.write(".ret", self.cur, v)
            self.jump(self.exit)
        else:
            self.stmts(node.body)
            if self.cur is not None:
                self.write(".ret", self.cur, Const(None))
                self.jump(self.exit)
        self.seal(self.exit)
        self.cur = self.exit
        self.blocks[self.exit].term = Return(self.read(".ret", self.exit))
        # the exit block goes last in the order
        self.order.remove(self.exit)
        self.order.append(self.exit)
        self._fill_edge_args()
        name = self.pyfn.__name__
        fn = Function(name if name != "<lambda>" else "lambda", self.blocks, self.order,
                      self.src.filename, self.src.loc(node).lineno, argnames)
        return fn

    def _fill_edge_args(self) -> None:
        for b, preds in self.preds.items():
            params = self.blocks[b].params
            for i, p in enumerate(preds):
                args = [self.incoming[q.id][i] for q in params]
                term = self.blocks[p].term
                if isinstance(term, Jump):
                    term.args = args
                elif term.true == b:
                    term.true_args = args
                else:
                    term.false_args = args

    @staticmethod
    def _assigned_names(fdef) -> Set[str]:
        names: Set[str] = set()
        body = fdef.body if isinstance(fdef.body, list) else [fdef.body]
        stack = list(body)
        while stack:
            n = stack.pop()
            if isinstance(n, gast.Name) and isinstance(n.ctx, gast.Store):
                names.add(n.id)
            if isinstance(n, (gast.FunctionDef, gast.Lambda, gast.ClassDef)):
                continue
            stack.extend(gast.iter_child_nodes(n))
        return names

    # -- statements -------------------------------------------------------------
    def stmts(self, body) -> None:
        for st in body:
            if self.cur is None:
                # code after break/continue/return: lower into an unreachable block
                self.cur = self.new_block(st)
                self.sealed.add(self.cur)
            self.stmt(st)

    def stmt(self, st) -> None:
        kind = type(st).__name__
        method = getattr(self, "stmt_" + kind, None)
        if method is None:
            hint = _UNSUPPORTED_STMT_HINTS.get(kind)
            raise self.unsupported(st, f"'{kind}' statements are not supported by zyg", hint)
        method(st)

    def stmt_Pass(self, st) -> None:
        pass

    def stmt_Expr(self, st) -> None:
        if isinstance(st.value, gast.Constant):
            return  # docstring or bare constant
        self.expr(st.value)

    def stmt_Assign(self, st) -> None:
        targets = st.targets
        if len(targets) == 1 and isinstance(targets[0], gast.Name):
            v = self.expr(st.value, targets[0].id)
            self.write(targets[0].id, self.cur, v)
            return
        if all(isinstance(t, gast.Name) for t in targets):
            v = self.expr(st.value, targets[0].id)
            for t in targets:
                self.write(t.id, self.cur, v)
            return
        if len(targets) == 1 and isinstance(targets[0], (gast.Tuple, gast.List)):
            self.assign_tuple(targets[0], st.value)
            return
        if len(targets) == 1 and isinstance(targets[0], gast.Subscript):
            v = self.expr(st.value)
            self.store_subscript(targets[0], v, st)
            return
        raise self.unsupported(st, "this assignment target is not supported",
                               "assign to plain names, array elements or unpack a tuple: a, b = b, a")

    def index(self, node) -> tuple:
        """Lower an index expression: (spec, operands) for GetItem/SetItem."""
        parts = node.elts if isinstance(node, gast.Tuple) else [node]
        spec, ops = [], []
        for p in parts:
            if isinstance(p, gast.Slice):
                spec.append("s")
                for q in (p.lower, p.upper, p.step):
                    ops.append(Const(None) if q is None else self.expr(q))
            elif isinstance(p, gast.Constant) and p.value is None:
                spec.append("n")
            elif isinstance(p, gast.Constant) and p.value is Ellipsis:
                spec.append("e")
            else:
                spec.append("i")
                ops.append(self.expr(p))
        return tuple(spec), ops

    def store_subscript(self, target, value: Operand, node) -> None:
        base = self.expr(target.value)
        spec, ops = self.index(target.slice)
        self.blocks[self.cur].stmts.append(
            Stmt(None, Call(SetItem(spec), [base] + ops + [value]), self.src.loc(node)))

    def assign_tuple(self, target, value) -> None:
        if not isinstance(value, (gast.Tuple, gast.List)):
            # unpack a tuple value (n, m = a.shape): one constant index per name
            v = self.expr(value)
            for k, t in enumerate(target.elts):
                if not isinstance(t, gast.Name):
                    raise self.unsupported(t, "only names can be unpacked from a tuple value")
                self.write(t.id, self.cur, self.emit(GetItem(("i",)), [v, Const(k)], t, t.id))
            return
        if len(value.elts) != len(target.elts):
            raise self.unsupported(value, f"cannot unpack {len(value.elts)} values into "
                                          f"{len(target.elts)} names")
        vals = []
        for t, e in zip(target.elts, value.elts):
            vals.append(self.expr(e, t.id if isinstance(t, gast.Name) else ""))
        for t, v in zip(target.elts, vals):
            if isinstance(t, gast.Name):
                self.write(t.id, self.cur, v)
            elif isinstance(t, (gast.Tuple, gast.List)):
                raise self.unsupported(t, "nested tuple unpacking is not supported")
            else:
                raise self.unsupported(t, "this assignment target is not supported")

    def stmt_AnnAssign(self, st) -> None:
        if st.value is None:
            return
        if not isinstance(st.target, gast.Name):
            raise self.unsupported(st, "this assignment target is not supported")
        val = self.expr(st.value, st.target.id)
        self.write(st.target.id, self.cur, val)

    def stmt_AugAssign(self, st) -> None:
        op = _BINOPS.get(type(st.op))
        if op is None:
            raise self.unsupported(st, f"operator {type(st.op).__name__} is not supported")
        if isinstance(st.target, gast.Subscript):
            # a[i] += v  ->  a[i] = a[i] + v (the old element is what the write records)
            base = self.expr(st.target.value)
            spec, ops = self.index(st.target.slice)
            old = self.emit(GetItem(spec), [base] + ops, st)
            right = self.expr(st.value)
            new = self.emit(op, [old, right], st)
            self.blocks[self.cur].stmts.append(
                Stmt(None, Call(SetItem(spec), [base] + ops + [new]), self.src.loc(st)))
            return
        if not isinstance(st.target, gast.Name):
            raise self.unsupported(st, "augmented assignment is only supported on names and array elements")
        name = st.target.id
        left = self.read_name(st.target)
        right = self.expr(st.value)
        # in place on arrays, a plain operation on numbers (decided once kinds are known)
        self.write(name, self.cur, self.emit(InPlace(op), [left, right], st, name))

    def stmt_If(self, st) -> None:
        t = self.new_block(st)
        f = self.new_block(st) if st.orelse else None
        join = self.new_block(st)
        self.cond(st.test, t, f if f is not None else join)
        self.seal(t)
        self.cur = t
        self.stmts(st.body)
        if self.cur is not None:
            self.jump(join)
        if f is not None:
            self.seal(f)
            self.cur = f
            self.stmts(st.orelse)
            if self.cur is not None:
                self.jump(join)
        self.seal(join)
        self.cur = join
        if not self.preds[join]:
            self.cur = join  # unreachable join: following code is dead but still lowered

    def stmt_While(self, st) -> None:
        if st.orelse:
            raise self.unsupported(st, "'while ... else' is not supported",
                                   "use a flag variable set before 'break'")
        head = self.new_block(st)
        body = self.new_block(st)
        exit = self.new_block(st)
        self.jump(head)
        self.cur = head
        self.cond(st.test, body, exit)
        self.seal(body)
        self.cur = body
        self.loops.append(_Loop(head, exit))
        self.stmts(st.body)
        self.loops.pop()
        if self.cur is not None:
            self.jump(head)
        self.seal(head)
        self.seal(exit)
        self.cur = exit

    def stmt_For(self, st) -> None:
        if st.orelse:
            raise self.unsupported(st, "'for ... else' is not supported",
                                   "use a flag variable set before 'break'")
        it = st.iter
        fn = self.static_value(it.func) if isinstance(it, gast.Call) else None
        if fn is builtins.range:
            if it.keywords or not 1 <= len(it.args) <= 3:
                raise self.unsupported(it, "range() takes 1 to 3 positional arguments")
            if not isinstance(st.target, gast.Name):
                raise self.unsupported(st.target, "the loop variable must be a plain name")
            args = [self.expr(a) for a in it.args]
            if len(args) == 1:
                start, stop, step = Const(0), args[0], Const(1)
            elif len(args) == 2:
                (start, stop), step = args, Const(1)
            else:
                start, stop, step = args
            if isinstance(step, Const) and step.value == 0:
                raise self.unsupported(it, "range() step must not be zero")
            name = st.target.id
            self.counted_loop(st, it, start, stop, step,
                              lambda i, body: self.write(name, body, i))
            return
        # for v in a / for k, v in enumerate(a) / for x, y in zip(a, b): a counted loop
        # over the first axis, the elements read with a[k]
        if fn is builtins.enumerate:
            if len(it.args) != 1 or it.keywords:
                raise self.unsupported(it, "enumerate() takes one argument here")
            seqs = [self.expr(it.args[0])]
            targets = st.target.elts if isinstance(st.target, gast.Tuple) else None
            if targets is None or len(targets) != 2:
                raise self.unsupported(st.target, "unpack enumerate() into two names: for i, v in enumerate(a)")
            idx_name, targets = targets[0], targets[1:]
        elif fn is builtins.zip:
            if not it.args or it.keywords:
                raise self.unsupported(it, "zip() takes arrays here")
            seqs = [self.expr(a) for a in it.args]
            targets = st.target.elts if isinstance(st.target, gast.Tuple) else None
            if targets is None or len(targets) != len(seqs):
                raise self.unsupported(st.target, f"unpack zip() into {len(seqs)} names")
            idx_name = None
        elif isinstance(it, gast.Call) and fn is not None:
            raise self.unsupported(it, "only 'for' over range(), an array, enumerate() or zip() is supported",
                                   "iterate over an index: for i in range(n)")
        else:
            seqs = [self.expr(it)]
            targets = [st.target]
            idx_name = None
        for t in targets + ([idx_name] if idx_name is not None else []):
            if not isinstance(t, gast.Name):
                raise self.unsupported(t, "the loop variables must be plain names")
        stop = self.emit(builtins.len, [seqs[0]], it)
        for q in seqs[1:]:
            stop = self.emit(builtins.min, [stop, self.emit(builtins.len, [q], it)], it)

        def bind(i, body):
            if idx_name is not None:
                self.write(idx_name.id, body, i)
            for t, q in zip(targets, seqs):
                self.write(t.id, body, self.emit(GetItem(("i",)), [q, i], t, t.id))
        self.counted_loop(st, it, Const(0), stop, Const(1), bind)

    def counted_loop(self, st, it, start, stop, step, bind) -> None:
        counter = self.synth("i")
        self.write(counter, self.cur, start)
        head = self.new_block(st)
        body = self.new_block(st)
        latch = self.new_block(st)
        exit = self.new_block(st)
        self.jump(head)
        self.cur = head
        i = self.read(counter, head)
        if isinstance(step, Const):
            c = self.emit(operator.lt if step.value > 0 else operator.gt, [i, stop], it, "")
        else:
            c = self.emit(range_cond, [i, stop, step], it, "")
        self.branch(c, body, exit)
        self.seal(body)
        self.cur = body
        bind(self.read(counter, body), body)
        self.loops.append(_Loop(latch, exit))
        self.stmts(st.body)
        self.loops.pop()
        if self.cur is not None:
            self.jump(latch)
        self.seal(latch)
        self.cur = latch
        nxt = self.emit(operator.add, [self.read(counter, latch), step], it, "")
        self.write(counter, latch, nxt)
        self.jump(head)
        self.seal(head)
        self.seal(exit)
        self.cur = exit

    def stmt_Break(self, st) -> None:
        self.jump(self.loops[-1].exit)

    def stmt_Continue(self, st) -> None:
        self.jump(self.loops[-1].cont)

    def stmt_Return(self, st) -> None:
        v = self.expr(st.value, "ret") if st.value is not None else Const(None)
        self.write(".ret", self.cur, v)
        self.jump(self.exit)

    # -- conditions ----------------------------------------------------------------
    def cond(self, node, t: int, f: int) -> None:
        """Lower a test so that control goes to block ``t`` if true, ``f`` otherwise."""
        if isinstance(node, gast.BoolOp):
            is_and = isinstance(node.op, gast.And)
            for v in node.values[:-1]:
                nxt = self.new_block(v)
                if is_and:
                    self.cond(v, nxt, f)
                else:
                    self.cond(v, t, nxt)
                self.seal(nxt)
                self.cur = nxt
            self.cond(node.values[-1], t, f)
        elif isinstance(node, gast.UnaryOp) and isinstance(node.op, gast.Not):
            self.cond(node.operand, f, t)
        elif isinstance(node, gast.Compare) and len(node.ops) > 1:
            left = self.expr(node.left)
            for k, (op, right) in enumerate(zip(node.ops, node.comparators)):
                r = self.expr(right)
                c = self.emit(self.cmpop(op, node), [left, r], node)
                if k == len(node.ops) - 1:
                    self.branch(c, t, f)
                else:
                    nxt = self.new_block(node)
                    self.branch(c, nxt, f)
                    self.seal(nxt)
                    self.cur = nxt
                left = r
        else:
            v = self.expr(node)
            if isinstance(v, Const):
                # constant test: still a real branch (keeps the CFG shape simple)
                v = Const(bool(v.value))
            self.branch(v, t, f)

    def cmpop(self, op, node):
        fn = _CMPOPS.get(type(op))
        if fn is None:
            raise self.unsupported(node, f"comparison '{type(op).__name__}' is not supported",
                                   "'is', 'in' and their negations are not differentiable code")
        return fn

    # -- expressions -------------------------------------------------------------------
    def expr(self, node, hint: str = "") -> Operand:
        kind = type(node).__name__
        method = getattr(self, "expr_" + kind, None)
        if method is None:
            raise self.unsupported(node, f"'{kind}' expressions are not supported by zyg",
                                   _UNSUPPORTED_EXPR_HINTS.get(kind))
        return method(node, hint)

    def expr_Constant(self, node, hint) -> Operand:
        if not isinstance(node.value, (int, float, bool, complex, type(None))):
            raise self.unsupported(node, f"constant {node.value!r} is not supported",
                                   "differentiated code works on numbers")
        return Const(node.value)

    def read_name(self, node) -> Operand:
        name = node.id
        if name in self.locals:
            v = self.read(name, self.cur)
            return v
        value = self.lookup_global(node)
        if isinstance(value, (int, float, bool, complex, np.ndarray)) or value is None:
            # globals are frozen at compile time (as numba does) and never differentiated
            return Const(value)
        raise self.unsupported(node, f"global {name!r} of type {type(value).__name__} "
                                     "cannot be used as a value here",
                               "globals read by differentiated code must be numbers")

    def expr_Name(self, node, hint) -> Operand:
        return self.read_name(node)

    def lookup_global(self, node) -> Any:
        name = node.id
        if name in self.closure:
            return self.closure[name]
        if name in self.globals:
            return self.globals[name]
        if hasattr(builtins, name):
            return getattr(builtins, name)
        raise self.unsupported(node, f"name {name!r} is not defined")

    def static_value(self, node) -> Any:
        """Resolve a global name or attribute chain (``np.sin``) to its object, or None."""
        if isinstance(node, gast.Name):
            if node.id in self.locals:
                return None
            return self.lookup_global(node)
        if isinstance(node, gast.Attribute):
            base = self.static_value(node.value)
            if base is None:
                return None
            try:
                return getattr(base, node.attr)
            except AttributeError:
                raise self.unsupported(node, f"{getattr(base, '__name__', base)!r} has no attribute {node.attr!r}")
        return None

    def expr_Attribute(self, node, hint) -> Operand:
        value = self.static_value(node)
        if value is None:
            if node.attr in _ATTRS:
                return self.emit(Attr(node.attr), [self.expr(node.value)], node, hint)
            raise self.unsupported(node, f"attribute '.{node.attr}' of a local value is not supported",
                                   f"supported array attributes: {', '.join(_ATTRS)}")
        if isinstance(value, (int, float, bool, complex)):
            return Const(value)
        raise self.unsupported(node, f"attribute {node.attr!r} of type {type(value).__name__} "
                                     "cannot be used as a value here")

    def expr_BinOp(self, node, hint) -> Operand:
        op = _BINOPS.get(type(node.op))
        if op is None:
            raise self.unsupported(node, f"operator {type(node.op).__name__} is not supported",
                                   "bitwise operators are not differentiable")
        left = self.expr(node.left)
        right = self.expr(node.right)
        return self.emit(op, [left, right], node, hint)

    def expr_UnaryOp(self, node, hint) -> Operand:
        op = _UNARY.get(type(node.op))
        if op is None:
            raise self.unsupported(node, f"operator {type(node.op).__name__} is not supported")
        v = self.expr(node.operand)
        if isinstance(v, Const) and op is operator.neg and isinstance(v.value, (int, float)):
            return Const(-v.value)
        return self.emit(op, [v], node, hint)

    def expr_Compare(self, node, hint) -> Operand:
        if len(node.ops) == 1:
            left = self.expr(node.left)
            right = self.expr(node.comparators[0])
            return self.emit(self.cmpop(node.ops[0], node), [left, right], node, hint)
        return self.bool_value(node)

    def bool_value(self, node) -> Operand:
        """Materialise a test as a bool value through branches and a merge block."""
        name = self.synth("b")
        t, f, join = self.new_block(node), self.new_block(node), self.new_block(node)
        self.cond(node, t, f)
        for blk, val in ((t, True), (f, False)):
            self.seal(blk)
            self.cur = blk
            self.write(name, blk, Const(val))
            self.jump(join)
        self.seal(join)
        self.cur = join
        return self.read(name, join)

    def expr_BoolOp(self, node, hint) -> Operand:
        # Python semantics: 'a and b' is a if a is falsy else b (short-circuit)
        name = self.synth("bo")
        join = self.new_block(node)
        is_and = isinstance(node.op, gast.And)
        for v in node.values[:-1]:
            val = self.expr(v)
            self.write(name, self.cur, val)
            nxt = self.new_block(v)
            if is_and:
                self.branch(val, nxt, join)
            else:
                self.branch(val, join, nxt)
            self.seal(nxt)
            self.cur = nxt
        last = self.expr(node.values[-1])   # may open new blocks: write where it ends
        self.write(name, self.cur, last)
        self.jump(join)
        self.seal(join)
        self.cur = join
        return self.read(name, join)

    def expr_IfExp(self, node, hint) -> Operand:
        name = self.synth("if")
        t, f, join = self.new_block(node), self.new_block(node), self.new_block(node)
        self.cond(node.test, t, f)
        for blk, e in ((t, node.body), (f, node.orelse)):
            self.seal(blk)
            self.cur = blk
            val = self.expr(e, hint)   # may open new blocks: write where it ends
            self.write(name, self.cur, val)
            self.jump(join)
        self.seal(join)
        self.cur = join
        return self.read(name, join)

    def expr_Tuple(self, node, hint) -> Operand:
        return self.emit(MakeTuple(), [self.expr(e) for e in node.elts], node, hint)

    def expr_Subscript(self, node, hint) -> Operand:
        base = self.expr(node.value)
        spec, ops = self.index(node.slice)
        return self.emit(GetItem(spec), [base] + ops, node, hint)

    def expr_Call(self, node, hint) -> Operand:
        fn = self.static_value(node.func)
        if fn is None and isinstance(node.func, gast.Attribute) and node.func.attr in _METHODS:
            # a method of an array: a.sum(axis=0) -> np.sum(a, axis=0)
            meth = _METHODS[node.func.attr]
            base = self.expr(node.func.value)
            args = [self.expr(a) for a in node.args]
            kwargs = {k.arg: self.expr(k.value) for k in node.keywords}
            if meth is np.reshape and len(args) != 1:
                args = [self.emit(MakeTuple(), args, node)]
            elif meth is np.transpose and args:
                raise self.unsupported(node, "transpose() with axes is not supported", "use a.T")
            return self.emit(meth, [base] + args, node, hint, kwargs)
        if fn is None:
            raise self.unsupported(node.func, "calling a local value is not supported",
                                   "call module-level functions")
        if fn is np.array or fn is np.asarray:
            if len(node.args) != 1 or node.keywords or not isinstance(node.args[0], (gast.List, gast.Tuple)):
                raise self.unsupported(node, "np.array() is supported on a literal list of numbers",
                                       "np.array([x, y, z])")
            return self.emit(ArrayOf(), [self.expr(e) for e in node.args[0].elts], node, hint)
        if fn in (np.concatenate, np.stack, np.vstack, np.hstack):
            if not node.args or not isinstance(node.args[0], (gast.List, gast.Tuple)):
                raise self.unsupported(node, f"np.{fn.__name__}() is supported on a literal tuple of arrays",
                                       f"np.{fn.__name__}((a, b))")
            parts = [self.expr(e) for e in node.args[0].elts]
            kwargs = {k.arg: self.expr(k.value) for k in node.keywords}
            if len(node.args) == 2:
                kwargs["axis"] = self.expr(node.args[1])
            return self.emit(Stacked(fn), parts, node, hint, kwargs)
        for a in node.args:
            if isinstance(a, gast.Starred):
                raise self.unsupported(a, "'*' unpacking in calls is not supported")
        if any(k.arg is None for k in node.keywords):
            raise self.unsupported(node, "'**' unpacking in calls is not supported")
        args = [self.expr(a) for a in node.args]
        kwargs = {k.arg: self.expr(k.value) for k in node.keywords}
        if fn in (min, max) and len(args) > 2 and not kwargs:
            acc = args[0]
            for a in args[1:]:
                acc = self.emit(fn, [acc, a], node, hint)
            return acc
        if fn in (builtins.range, builtins.print):
            raise self.unsupported(node, f"{fn.__name__}() is not supported here")
        return self.emit(fn, args, node, hint, kwargs)


def lower(pyfn: Any) -> Function:
    """Parse and lower ``pyfn`` to SSA (before cleanup passes)."""
    return Lowerer(pyfn).lower()
