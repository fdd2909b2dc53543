"""Lower a Python function (parsed with gast) straight to SSA with block arguments.

The construction is Braun et al. (CC 2013), "Simple and Efficient Construction of
SSA Form": variables are looked up per block, blocks are *sealed* once all their
predecessors are known, and reads in unsealed blocks create incomplete block
parameters that are completed on sealing.  Block parameters play the role of phi
nodes.  Trivial parameters are removed afterwards by a pass (``passes.py``).

Desugaring happens on the way: ``elif``, augmented assignment, literal tuple
unpacking, chained comparisons, ``and``/``or``/``not`` (short-circuit branches),
``x if c else y``, ``for ... in range(...)`` (counted loops; ``numba.prange`` is
``range``), ``while``/``for ... else``, ``for`` over a tuple literal (unrolled),
``break``, ``continue`` and ``return`` anywhere (one exit block).
"""
from __future__ import annotations

import ast
import builtins
import inspect
import math
import operator
import sys
import textwrap
import types
from typing import Any, Dict, List, Optional, Set, Tuple

import gast

from ..errors import UnsupportedSyntax
from . import hooks
from .captured import _LIBRARY_PACKAGES, Closure, _MISSING, Reads, Slot, is_stable_module
from .ir import Block, Branch, Call, Const, Function, Jump, Loc, Operand, Return, Stmt, Undef, Var
from .prims import (ArrayOf, Attr, CastLike, GetItem, InPlace, MakeTuple, Recursive, Replace, SetItem,
                    Stacked, STACKED_FNS,
                    is_namedtuple_class)

import numpy as np

# array methods, lowered to calls of the numpy function of the same meaning
_METHODS = {
    "copy": np.copy, "sum": np.sum, "mean": np.mean, "prod": np.prod, "max": np.max,
    "min": np.min, "argmax": np.argmax, "argmin": np.argmin, "dot": np.dot,
    "cumsum": np.cumsum, "transpose": np.transpose, "ravel": np.ravel, "flatten": np.ravel,
    "reshape": np.reshape, "clip": np.clip, "conjugate": np.conjugate, "conj": np.conjugate,
    "var": np.var, "std": np.std, "cumprod": np.cumprod, "repeat": np.repeat,
}
_UFUNC_OPS = {np.add: operator.add, np.subtract: operator.sub, np.multiply: operator.mul,
              np.divide: operator.truediv}
_ATTRS = ("shape", "size", "ndim", "T", "real", "imag", "dtype")

_BINOPS = {
    gast.Add: operator.add, gast.Sub: operator.sub, gast.Mult: operator.mul,
    gast.Div: operator.truediv, gast.FloorDiv: operator.floordiv,
    gast.Mod: operator.mod, gast.Pow: operator.pow, gast.MatMult: operator.matmul,
    # bitwise (not differentiable): bool masks (a & b, ~m) and integer bit tricks
    gast.BitAnd: operator.and_, gast.BitOr: operator.or_, gast.BitXor: operator.xor,
    gast.LShift: operator.lshift, gast.RShift: operator.rshift,
}
_CMPOPS = {
    gast.Lt: operator.lt, gast.LtE: operator.le, gast.Gt: operator.gt,
    gast.GtE: operator.ge, gast.Eq: operator.eq, gast.NotEq: operator.ne,
}
_UNARY = {gast.USub: operator.neg, gast.UAdd: operator.pos, gast.Not: operator.not_,
          gast.Invert: operator.invert}

_UNSUPPORTED_STMT_HINTS = {
    "Try": "exceptions cannot be differentiated; move the try/except outside the function",
    "With": "context managers are not supported inside differentiated code",
    "AsyncWith": "async code is not supported",
    "AsyncFor": "async code is not supported",
    "AsyncFunctionDef": "async code is not supported",
    "Global": "differentiated functions may read globals (at call time) but not rebind them",
    "Nonlocal": "differentiated functions may not write variables of an enclosing function",
    "ClassDef": "define classes outside the differentiated function",
    "Delete": "'del' is not supported; just stop using the variable",
    "Import": "import modules at module level, outside the differentiated function",
    "ImportFrom": "import modules at module level, outside the differentiated function",
}
_UNSUPPORTED_EXPR_HINTS = {
    "Yield": "generators cannot be differentiated",
    "YieldFrom": "generators cannot be differentiated",
    "Await": "async code is not supported",
    "ListComp": "list comprehensions are supported; this one is in an unsupported place",
    "SetComp": "comprehensions are not supported; write an explicit loop",
    "DictComp": "comprehensions are not supported; write an explicit loop",
    "GeneratorExp": "generator expressions are supported as the argument of sum/min/max; otherwise write an explicit loop",
    "List": "lists are only supported as np.array([x, y, ...]) of numbers",
    "Dict": "dicts are not supported",
    "Set": "sets are not supported",
    "Starred": "'*' unpacking is only supported in calls: f(*t)",
    "JoinedStr": "strings are not supported in differentiated code",
    "NamedExpr": "':=' is not supported; use a separate assignment",
}


try:
    from numba import prange as _PRANGE
except ImportError:     # pragma: no cover - numba is a dependency
    _PRANGE = object()


def _scalar_type(v: Any) -> bool:
    """A number type (``float``, ``np.float64``): called as a conversion, passed as a dtype."""
    return isinstance(v, type) and (v in (int, float, bool, complex) or issubclass(v, (np.number, np.bool_)))


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



def _call_const(node) -> Optional[Const]:
    """A literal string or list of integers (nested lists and tuples of them) passed to a
    call, as a constant (lists become tuples): ``np.einsum('ij,j->i', a, x)``,
    ``np.linalg.norm(a, 'fro')``, ``np.tensordot(a, b, axes=([1], [0]))``; None for
    anything else."""
    if isinstance(node, gast.Constant) and isinstance(node.value, str):
        return Const(node.value)
    def value(n):
        if isinstance(n, gast.Constant) and type(n.value) is int:
            return n.value
        if isinstance(n, (gast.List, gast.Tuple)):
            vals = [value(e) for e in n.elts]
            return None if any(v is None for v in vals) else tuple(vals)
        return None
    def has_list(n):
        return isinstance(n, gast.List) or isinstance(n, gast.Tuple) and any(map(has_list, n.elts))
    if not has_list(node):      # tuples of numbers are lowered as tuples
        return None
    v = value(node)
    return None if v is None else Const(v)

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


class _Frame:
    """One function being lowered: the top-level function or an inlined callee.

    Variables of a frame are named ``prefix + name`` in the SSA construction, so
    that an inlined callee's locals never meet the caller's.  ``parent`` is the
    lexically enclosing frame (for closures and lambdas), whose variables the
    body reads at the point of the call, as Python's late-binding cells do.
    """

    def __init__(self, src: "_Source", globals: dict, closure: dict, prefix: str,
                 parent: Optional["_Frame"] = None, what: Any = None):
        self.src = src
        self.globals = globals
        self.closure = closure
        self.prefix = prefix
        self.parent = parent
        self.what = what                 # the function or closure node (recursion check)
        self.locals: Set[str] = set()
        self.static: Dict[str, Any] = {}  # names bound to functions (def, lambda, arguments)
        self.texts: Dict[str, Optional[str]] = {}   # locals only ever assigned strings
        self.nullable: Set[str] = set()  # locals some statement sets to None (Lowerer.write)
        self.returns_list = False        # an inlined helper returning a list (lists.py)
        self.loops: List[_Loop] = []
        self.exit: Optional[int] = None


def _cells(pyfn) -> dict:
    """The closure cells of ``pyfn`` by free-variable name (read when the code is lowered,
    and again at every call for the arrays among them)."""
    if not pyfn.__closure__:
        return {}
    return dict(zip(pyfn.__code__.co_freevars, pyfn.__closure__))


_SOURCES: Dict[Any, "_Source"] = {}


def source_of(pyfn) -> "_Source":
    """The parsed source of a function, parsed once per function object."""
    src = _SOURCES.get(pyfn)
    if src is None:
        src = _SOURCES[pyfn] = _Source(pyfn)
    return src


MAX_INLINE_DEPTH = 64
MAX_UNROLL = 256        # elements of a tuple a loop is unrolled over


def is_user_function(fn: Any) -> bool:
    """A Python function whose source zyg may inline (no rule, not a library function)."""
    if hooks.has_rule(fn):
        return False
    py = getattr(fn, "py_func", fn)
    if not isinstance(py, types.FunctionType) or hasattr(fn, "_zyg"):
        return False
    mod = (getattr(py, "__module__", None) or "").split(".")[0]
    return mod not in _LIBRARY_PACKAGES


class Lowerer:
    """Builds a :class:`Function` from a Python function's source."""

    def __init__(self, pyfn: Any, statics: Optional[Dict[int, Any]] = None):
        self.statics = statics or {}     # argument position -> function passed for it
        self.pyfn = unwrap(pyfn)
        if not isinstance(self.pyfn, types.FunctionType):
            raise UnsupportedSyntax(f"zyg can only transform Python functions, not {type(pyfn).__name__}")
        cells = getattr(self.pyfn, "_zyg_closure", None)
        self.f = _Frame(source_of(self.pyfn), self.pyfn.__globals__,
                        cells if cells is not None else _cells(self.pyfn), "", what=self.pyfn)
        self.reads = Reads()             # hidden parameters (captured arrays) and guards
        self.hidden_vars: Dict[Any, Var] = {}
        self.entry_id: Optional[int] = None
        self.frames: List[_Frame] = [self.f]   # the inlining stack
        self.ninline = 0
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
        self.cur: Optional[int] = None
        self.nsynth = 0
        self.list_results: Set[int] = set()    # values of calls of helpers returning lists

    # the current frame's parts
    src = property(lambda self: self.f.src)
    globals = property(lambda self: self.f.globals)
    closure = property(lambda self: self.f.closure)
    locals = property(lambda self: self.f.locals)
    loops = property(lambda self: self.f.loops)
    exit = property(lambda self: self.f.exit)

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
        """Define the current frame's variable ``name`` in block ``b``.

        A local that some statement sets to ``None`` (``best = None``) has a hidden flag
        ``name.none`` beside it, which ``name is None`` reads; while the flag is set its
        value is undefined (never read by a program that tests it first), so its kind is
        that of the values it holds otherwise."""
        key = self.f.prefix + name
        if name in self.f.nullable:
            none = isinstance(value, Const) and not isinstance(value, Undef) and value.value is None
            self.defs[b][key + ".none"] = Const(none)
            if none:
                value = Undef()
        self.defs[b][key] = value

    def none_flag(self, node) -> Optional[Operand]:
        """The flag ``name is None`` of a local that may hold ``None`` (None: not such a local)."""
        if not isinstance(node, gast.Name):
            return None
        where, fr = self.resolve(node.id)
        if where != "var" or node.id not in fr.nullable:
            return None
        return self._read(fr.prefix + node.id + ".none", self.cur)

    def read(self, name: str, b: int) -> Operand:
        """Read the current frame's variable ``name`` in block ``b``."""
        return self._read(self.f.prefix + name, b)

    def _read(self, key: str, b: int) -> Operand:
        d = self.defs[b]
        if key in d:
            return d[key]
        return self._read_recursive(key, b)

    def _read_recursive(self, key: str, b: int) -> Operand:
        hint = key.rsplit(":", 1)[-1]
        if b not in self.sealed:
            val: Operand = self.new_param(b, hint)
            self.incomplete[b][key] = val
        elif len(self.preds[b]) == 1:
            val = self._read(key, self.preds[b][0])
        elif not self.preds[b]:
            val = Undef()
        else:
            val = self.new_param(b, hint)
            self.defs[b][key] = val
            self._add_operands(key, val, b)
        self.defs[b][key] = val
        return val

    def _add_operands(self, key: str, param: Var, b: int) -> None:
        for p in self.preds[b]:
            self.incoming[param.id].append(self._read(key, p))

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
        # keyword-only parameters follow the positional ones (zyg/entry.py binds calls)
        argnames = [a.id for a in args.posonlyargs + args.args + args.kwonlyargs]
        entry = self.new_block(node)
        self.entry_id = entry
        self.sealed.add(entry)
        self.f.nullable = _none_locals(node)
        for i, name in enumerate(argnames):
            if i in self.statics and self.statics[i] is None:
                # an optional argument passed as None: a constant of this specialisation
                self.write(name, entry, Const(None))
                continue
            if i in self.statics:
                # a function argument: bound statically, not a parameter of the SSA function
                self.f.static[name] = self.statics[i]
                continue
            p = self.new_param(entry, name)
            self.write(name, entry, p)
        self.f.locals = set(argnames) | self._assigned_names(node)
        self.f.texts = _text_locals(node, set(argnames))
        self.f.exit = self.new_block(node)
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
                      self.src.filename, self.src.loc(node).lineno,
                      [a for i, a in enumerate(argnames) if i not in self.statics] +
                      [s.name for s in self.reads.hidden])
        fn.reads = self.reads
        return fn

    def hidden_param(self, slot: Slot) -> Var:
        """The entry-block parameter through which the array read from ``slot`` is passed
        (closure conversion: the array is fetched again at every call, never frozen)."""
        v = self.hidden_vars.get(slot.ident())
        if v is None:
            v = self.new_param(self.entry_id, slot.name)
            self.hidden_vars[slot.ident()] = v
            self.reads.hidden.append(slot)
        return v

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

    def stmt_Nonlocal(self, st) -> None:
        """``nonlocal a`` (``global a``) of a variable the function only reads: a read of the
        enclosing function's variable (a global), as without the declaration."""
        kind = type(st).__name__
        for name in st.names:
            if name in self.f.locals:
                raise self.unsupported(st, f"the {kind.lower()} variable {name!r} is assigned here: "
                                           f"differentiated code may read, not rebind, a variable of "
                                           f"{'an enclosing function' if kind == 'Nonlocal' else 'the module'}",
                                       _UNSUPPORTED_STMT_HINTS[kind])

    stmt_Global = stmt_Nonlocal

    def stmt_Raise(self, st) -> None:
        from .raising import lower_raise
        lower_raise(self, st)

    def stmt_Assert(self, st) -> None:
        from .raising import lower_assert
        lower_assert(self, st)

    def stmt_Expr(self, st) -> None:
        if isinstance(st.value, gast.Constant):
            return  # docstring or bare constant
        self.expr(st.value)

    def stmt_Assign(self, st) -> None:
        from .lists import assign as list_assign
        if list_assign(self, st):
            return      # out = [], out = [... for ...] (zyg/ssa/lists.py)
        targets = st.targets
        if len(targets) == 1 and isinstance(targets[0], gast.Name):
            if targets[0].id in self.f.texts:
                return      # msg = "...": a message, spelled where it is raised (raising.py)
            fv = self.function_value(st.value)
            if fv is not None and (not isinstance(fv, type) or _scalar_type(fv)):
                # g = lambda y: ..., h = g, s = np.sin: a function, bound statically
                self.bind_function(targets[0].id, fv, st)
                return
            if targets[0].id in self.f.static:
                raise self.unsupported(st, f"{targets[0].id!r} names a function and is reassigned "
                                           "to a value", "use another name for the value")
            v = self.expr(st.value, targets[0].id)
            if isinstance(v, Var) and v.id in self.list_results:
                from .lists import bind_returned
                bind_returned(self, targets[0].id, v, st)
                return
            self.write(targets[0].id, self.cur, v)
            if targets[0].id in self.f.nullable:
                flag = self.none_flag(st.value)
                if flag is not None:        # best = other: other's None-ness too
                    self.defs[self.cur][self.f.prefix + targets[0].id + ".none"] = flag
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
            elif (isinstance(p, gast.Constant) and p.value is None) or (
                    isinstance(p, gast.Attribute) and p.attr == "newaxis"
                    and self.static_value(p.value) is np):
                spec.append("n")
            elif isinstance(p, gast.Constant) and p.value is Ellipsis:
                spec.append("e")
            else:
                spec.append("i")
                ops.append(self.expr(p))
        return tuple(spec), ops

    def store_subscript(self, target, value: Operand, node) -> None:
        if isinstance(target.value, gast.Attribute) and target.value.attr == "flat":
            raise self.unsupported(node, "writing through a.flat is not supported",
                                   "index the array itself: a[i, j] = v (np.ndindex gives i, j)")
        base = self.expr(target.value)
        spec, ops = self.index(target.slice)
        self.blocks[self.cur].stmts.append(
            Stmt(None, Call(SetItem(spec), [base] + ops + [value]), self.src.loc(node)))

    def assign_tuple(self, target, value) -> None:
        if not isinstance(value, (gast.Tuple, gast.List)):
            # unpack a tuple value (n, m = a.shape): one constant index per name
            self.unpack(target, self.expr(value))
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
                self.unpack(t, v)
            else:
                raise self.unsupported(t, "this assignment target is not supported")

    def unpack(self, target, v: Operand) -> None:
        """``a, (b, c) = v`` for a tuple value ``v``: constant indices, nested as needed."""
        for k, t in enumerate(target.elts):
            part = self.emit(GetItem(("i",)), [v, Const(k)], t, t.id if isinstance(t, gast.Name) else "")
            if isinstance(t, gast.Name):
                self.write(t.id, self.cur, part)
            elif isinstance(t, (gast.Tuple, gast.List)):
                self.unpack(t, part)
            else:
                raise self.unsupported(t, "only names can be unpacked from a tuple value")

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
        from .lists import augassign as list_augassign
        list_augassign(self, st)
        if isinstance(st.target, gast.Subscript) and isinstance(st.target.value, gast.Attribute) \
                and st.target.value.attr == "flat":
            raise self.unsupported(st, "writing through a.flat is not supported",
                                   "index the array itself: a[i, j] += v (np.ndindex gives i, j)")
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
        shape = _dispatch_shape(st) if not st.orelse else None
        if shape is not None:
            self.dispatch_loop(st, *shape)
            return
        head = self.new_block(st)
        body = self.new_block(st)
        exit = self.new_block(st)
        els = self.new_block(st.orelse[0]) if st.orelse else exit
        self.jump(head)
        self.cur = head
        self.cond(st.test, body, els)
        self.seal(body)
        self.cur = body
        self.loops.append(_Loop(head, exit))
        self.stmts(st.body)
        self.loops.pop()
        if self.cur is not None:
            self.jump(head)
        self.seal(head)
        self.loop_else(st, els, exit)

    def loop_else(self, st, els: int, exit: int) -> None:
        """The ``else`` of a loop: it runs when the loop's test fails (the edge into
        ``els``), not after a ``break`` (which jumps to ``exit`` directly)."""
        if els != exit:
            self.seal(els)
            self.cur = els
            self.stmts(st.orelse)
            if self.cur is not None:
                self.jump(exit)
        self.seal(exit)
        self.cur = exit

    def dispatch_loop(self, st, var: str, cases: list, orelse: list) -> None:
        """A dispatch loop ``while v >= 0: if v == k1: ... elif v == k2: ...`` (the shape of
        zyg's own generated code, lowered again for higher-order derivatives), with its
        transitions threaded.

        A case that ends by assigning a constant ``v = c`` goes straight to the block of
        case ``c`` (or to the loop's exit when ``c < 0``) instead of back to the header
        and down the test chain.  The CFG then has the shape of the one the code was
        generated from; without threading, every value live anywhere in the loop would
        be a parameter of the header, and each level of nesting would multiply the code.
        Inside case ``k`` the variable is known to equal ``k``.
        """
        head = self.new_block(st)
        exit = self.new_block(st)
        bodies = [self.new_block(case) for case in cases]
        other = self.new_block(orelse[0]) if orelse else None
        targets: Dict[int, int] = {}
        for case, b in zip(cases, bodies):
            targets.setdefault(case.test.comparators[0].value, b)

        def goto(c: int) -> int:
            if c < 0:
                return exit
            return targets.get(c, other if other is not None else head)

        self.jump(head)
        self.cur = head
        first = self.new_block(st)
        self.cond(st.test, first, exit)
        self.seal(first)
        self.cur = first
        for i, case in enumerate(cases):
            nxt = self.new_block(case) if i + 1 < len(cases) else (other if other is not None else head)
            self.cond(case.test, bodies[i], nxt)
            if i + 1 < len(cases):
                self.seal(nxt)
                self.cur = nxt
        self.loops.append(_Loop(head, exit))
        for case, b in zip(cases, bodies):
            self.cur = b
            self.write(var, b, Const(case.test.comparators[0].value))
            self._tail_stmts(case.body, var, goto)
            if self.cur is not None:
                self.jump(head)
        if other is not None:
            self.cur = other
            self._tail_stmts(orelse, var, goto)
            if self.cur is not None:
                self.jump(head)
        self.loops.pop()
        for b in bodies + ([other] if other is not None else []) + [head, exit]:
            self.seal(b)
        self.cur = exit

    def _tail_stmts(self, body, var: str, goto) -> None:
        """Lower a dispatch case's statements; an assignment ``var = <int>`` in tail position
        (last, possibly inside the arms of a final ``if``) jumps to that case."""
        self.stmts(body[:-1])
        last = body[-1]
        if self.cur is None:
            self.cur = self.new_block(last)
            self.sealed.add(self.cur)
        c = _const_assign(last, var)
        if c is not None:
            self.write(var, self.cur, Const(c))
            self.jump(goto(c))
        elif isinstance(last, gast.If):
            t = self.new_block(last)
            f = self.new_block(last) if last.orelse else None
            join = self.new_block(last)
            self.cond(last.test, t, f if f is not None else join)
            for blk, arm in ((t, last.body), (f, last.orelse)):
                if blk is None:
                    continue
                self.seal(blk)
                self.cur = blk
                self._tail_stmts(arm, var, goto)
                if self.cur is not None:
                    self.jump(join)
            self.seal(join)
            self.cur = join
        else:
            self.stmt(last)

    def stmt_For(self, st) -> None:
        it = st.iter
        fn = self.static_value(it.func) if isinstance(it, gast.Call) else None
        if fn is not None and fn in hooks.LOOPS and hooks.LOOPS[fn].parallel:
            return self.parallel_loop(st, it, hooks.LOOPS[fn])
        if fn is not None and fn in hooks.LOOPS:
            if st.orelse:
                raise self.unsupported(st, "'for ... else' over a checkpointed range is not supported",
                                       "use a flag variable set before 'break'")
            return self.checkpointed_loop(st, it, hooks.LOOPS[fn])
        if isinstance(it, (gast.Tuple, gast.List)) and \
                not any(isinstance(e, gast.Starred) for e in it.elts):
            # for i, j in ((0, 1), (1, 2)): / for w in [a, b]: one copy of the body per element
            return self.unrolled_loop(st, [self.expr(e) for e in it.elts])
        if not isinstance(it, gast.Call):
            seq = self.static_value(it) if isinstance(it, (gast.Name, gast.Attribute)) else None
            if isinstance(seq, tuple):
                # a global tuple (of tuples) of numbers: PAIRS = ((0, 1), (1, 2))
                return self.unrolled_loop(st, [Const(e) for e in seq])
        if fn is _PRANGE:
            # numba.prange: zyg runs the loop serially (a parallel loop's iterations are
            # independent, so the serial order computes the same values)
            fn = builtins.range
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
            from .lists import sequence
            seqs = [sequence(self, it.args[0])]
            targets = st.target.elts if isinstance(st.target, gast.Tuple) else None
            if targets is None or len(targets) != 2:
                raise self.unsupported(st.target, "unpack enumerate() into two names: for i, v in enumerate(a)")
            idx_name, targets = targets[0], targets[1:]
        elif fn is builtins.zip:
            if not it.args or it.keywords:
                raise self.unsupported(it, "zip() takes arrays here")
            from .lists import sequence
            seqs = [sequence(self, a) for a in it.args]     # range() becomes np.arange
            targets = st.target.elts if isinstance(st.target, gast.Tuple) else None
            if targets is None or len(targets) != len(seqs):
                raise self.unsupported(st.target, f"unpack zip() into {len(seqs)} names")
            idx_name = None
        elif fn is np.ndindex:
            from .iterators import lower_ndindex
            return lower_ndindex(self, st, it)
        elif isinstance(it, gast.Call) and fn is not None and not (
                isinstance(fn, Closure) or is_user_function(fn)):
            raise self.unsupported(it, "only 'for' over range(), np.ndindex(), an array, enumerate() or zip() is supported",
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

    def unrolled_loop(self, st, values: List[Operand]) -> None:
        """``for t in (v0, v1, ...)``: a loop over a tuple or list literal (or a constant
        tuple) is its body once per element, each with ``t`` bound to that element (the
        elements are evaluated first, as Python builds the tuple before iterating);
        ``continue`` goes to the next copy, ``break`` to the exit."""
        if len(values) > MAX_UNROLL:
            raise self.unsupported(st.iter, f"a loop over a tuple of {len(values)} elements is "
                                            f"unrolled, and at most {MAX_UNROLL} are allowed",
                                   "iterate over an array: for v in np.array(...)")
        exit = self.new_block(st)
        els = self.new_block(st.orelse[0]) if st.orelse else exit
        if not values:
            self.jump(els)
        for k, v in enumerate(values):
            nxt = self.new_block(st) if k + 1 < len(values) else els
            self.bind_target(st.target, v)
            self.loops.append(_Loop(nxt, exit))
            self.stmts(st.body)
            self.loops.pop()
            if self.cur is not None:
                self.jump(nxt)
            if nxt != els:
                self.seal(nxt)
                self.cur = nxt
        self.loop_else(st, els, exit)

    def bind_target(self, target, v: Operand) -> None:
        """Assign ``v`` to a loop target: a name, or names unpacked from a tuple."""
        if isinstance(target, gast.Name):
            self.write(target.id, self.cur, v)
        elif isinstance(target, (gast.Tuple, gast.List)):
            if isinstance(v, Const) and isinstance(v.value, tuple):
                if len(v.value) != len(target.elts):
                    raise self.unsupported(target, f"{len(v.value)} values cannot be unpacked into "
                                                   f"{len(target.elts)} names")
                for t, e in zip(target.elts, v.value):
                    self.bind_target(t, Const(e))
            else:
                self.unpack(target, v)
        else:
            raise self.unsupported(target, "the loop variables must be plain names")

    def counted_loop(self, st, it, start, stop, step, bind) -> None:
        counter = self.synth("i")
        self.write(counter, self.cur, start)
        head = self.new_block(st)
        body = self.new_block(st)
        latch = self.new_block(st)
        exit = self.new_block(st)
        self.jump(head)
        orelse = getattr(st, "orelse", None)
        els = self.new_block(orelse[0]) if orelse else exit
        self.cur = head
        i = self.read(counter, head)
        if isinstance(step, Const):
            c = self.emit(operator.lt if step.value > 0 else operator.gt, [i, stop], it, "")
        else:
            c = self.emit(range_cond, [i, stop, step], it, "")
        self.branch(c, body, els)
        self.seal(body)
        self.cur = body
        bind(self.read(counter, body), body)
        self.loops.append(_Loop(latch, exit))
        self.loops[-1].trip = (start, stop, step)   # bounds the lists it appends to (lists.py)
        self.loops[-1].node = st
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
        self.loop_else(st, els, exit)

    def checkpointed_loop(self, st, it, prims: "hooks.LoopPrims") -> None:
        """``for t in zyg.checkpointed_range(...)``: the body becomes a step function of the
        carried values and the values it reads; the loop one checkpointed call
        (``zyg/nested/ckloop.py``) and one read-out per carried value."""
        if not isinstance(st.target, gast.Name):
            raise self.unsupported(st.target, "the loop variable of checkpointed_range must be a plain name")
        if not 1 <= len(it.args) <= 2 or any(isinstance(a, gast.Starred) for a in it.args):
            raise self.unsupported(it, "checkpointed_range takes 1 or 2 positional arguments "
                                       "(stop or start, stop) and snapshots=")
        snaps: Operand = Const(10)
        for kw in it.keywords:
            if kw.arg != "snapshots":
                raise self.unsupported(it, f"checkpointed_range has no argument {kw.arg!r}")
            snaps = self.expr(kw.value)
        args = [self.expr(a) for a in it.args]
        start, stop = (Const(0), args[0]) if len(args) == 1 else args
        T = self.emit(operator.sub, [stop, start], it, "T")
        scan = _BodyScan(self, st.body)
        t = st.target.id
        after = self._loads_after(st)
        cands = (scan.stores | scan.mutated) - {t}
        carried = sorted(n for n in cands if n in scan.exposed or n in after or n not in scan.stores)
        free = sorted(n for n in scan.loads - scan.stores - {t} if n not in carried)
        c_ops: List[Operand] = []
        for n in carried:
            where, fr = self.resolve(n)
            if where != "var":
                raise self.unsupported(st, f"the checkpointed loop writes into {n!r}, which is not a "
                                           "variable of this function")
            v = self._read(fr.prefix + n, self.cur)
            if isinstance(v, Undef):
                why = "read before it is assigned" if n in scan.exposed else "used after the loop"
                raise self.unsupported(st, f"{n!r} is assigned in the checkpointed loop and {why}; "
                                           "give it a value before the loop")
            c_ops.append(v)
        f_names, f_ops = self._free_operands(st, free, "checkpointed loop")
        self._no_shared_operands(st, carried, c_ops, f_names, f_ops, scan.mutated)
        step = self._step_function(st, t, carried, f_names)
        loop = prims.loop(step, len(carried), carried + f_names, self.src.loc(st))
        z = self.emit(loop, [T, start, snaps] + c_ops + f_ops, st, "ckpt")
        for k, n in enumerate(carried):
            v = self.emit(prims.part(k), [z] + c_ops, st, n)
            if n in scan.stores:
                self.write(n, self.cur, v)
            else:
                # an array the body writes into: the values go back into it (other names
                # of the array see them, as with the plain loop)
                base = self._read(self.resolve(n)[1].prefix + n, self.cur)
                self.blocks[self.cur].stmts.append(
                    Stmt(None, Call(SetItem(("s",)), [base, Const(None), Const(None), Const(None), v]),
                         self.src.loc(st)))

    def parallel_loop(self, st, it, prims: "hooks.LoopPrims") -> None:
        """``for i in numba.prange(...)``: the body becomes a step function of one iteration,
        ``step(i, *carried, *read) -> carried``, and the loop one call of ``prims.loop``
        (``zyg/tasks/prange.py``, whose iterations run in parallel forwards and in the
        adjoint) and one read-out per carried value.  The carried values are the arrays the
        body writes into and the sum reductions (``s += ...``); every other value the body
        assigns is private to its iteration, as in numba."""
        what = "prange loop"
        if st.orelse:
            raise self.unsupported(st, "'for ... else' over prange is not supported")
        if not isinstance(st.target, gast.Name):
            raise self.unsupported(st.target, "the loop variable of prange must be a plain name")
        if it.keywords or not 1 <= len(it.args) <= 2 or any(isinstance(a, gast.Starred) for a in it.args):
            raise self.unsupported(it, "zyg differentiates prange(stop) and prange(start, stop)",
                                   "write a step other than 1 as an index computed from the loop variable")
        args = [self.expr(a) for a in it.args]
        start, stop = (Const(0), args[0]) if len(args) == 1 else args
        T = self.emit(operator.sub, [stop, start], it, "T")
        scan = _BodyScan(self, st.body, what)
        t = st.target.id
        after = self._loads_after(st)
        arrays = sorted(scan.mutated - {t})
        for n in arrays:
            if n in scan.stores and (n in scan.exposed or n in after):
                raise self.unsupported(st, f"the prange loop both rebinds {n!r} and writes into it")
        arrays = [n for n in arrays if n not in scan.stores]
        sums, ops = [], []
        for n in sorted(scan.stores - scan.mutated - {t}):
            if n not in scan.exposed and n not in after:
                continue                    # private to an iteration
            op, bad = _reduction(st.body, n, self.static_value)
            if n not in scan.exposed:
                where = next((m for b in st.body for m in gast.walk(b)
                              if isinstance(m, gast.Name) and m.id == n), st)
                raise self.unsupported(where, f"{n!r} is assigned in the prange loop and read after "
                                              "it; each iteration has its own value of it",
                                       "write the value wanted after the loop into an array "
                                       "element indexed by the loop variable")
            if bad is not None:
                raise self.unsupported(bad if bad is not None else st,
                                       f"{n!r} is carried from one iteration of the prange loop "
                                       "to the next, and is not a sum, min or max reduction",
                                       "only reductions (s += x, s -= x, s = s + x, "
                                       "m = max(m, x), m = min(m, x)) may be carried between the "
                                       "iterations of a parallel loop; assign other values to an "
                                       "array element per iteration")
            sums.append(n)
            ops.append(op)
        carried = arrays + sums
        free = sorted(n for n in scan.loads - scan.stores - {t} if n not in carried)
        c_ops: List[Operand] = []
        for n in carried:
            where, fr = self.resolve(n)
            if where != "var":
                raise self.unsupported(st, f"the prange loop writes into {n!r}, which is not a "
                                           "variable of this function",
                                       "pass the array to the function as an argument")
            v = self._read(fr.prefix + n, self.cur)
            if isinstance(v, Undef):
                raise self.unsupported(st, f"{n!r} is carried by the prange loop; give it a value "
                                           "before the loop")
            c_ops.append(v)
        f_names, f_ops = self._free_operands(st, free, what)
        self._no_shared_operands(st, carried, c_ops, f_names, f_ops, set(arrays))
        step = self._step_function(st, t, carried, f_names, kind="prange_step")
        # which written arrays are read at elements other than the ones the same iteration
        # writes (their adjoint adds into shared elements: it runs serially)
        own = t not in scan.stores
        private = [n for n in carried + f_names if own and _indexed_by(st.body, n, t)]
        shared = [n for n in arrays if _reads_elsewhere(st.body, n) and n not in private]
        loop = prims.loop(step, len(carried), carried + f_names, self.src.loc(st))
        scattered = [n for n in f_names if n not in private and _scattered(st.body, n, t)]
        loop.fn.arrays, loop.fn.shared, loop.fn.private = len(arrays), shared, private
        loop.fn.scattered = scattered
        loop.fn.ops = ["array"] * len(arrays) + ops
        z = self.emit(loop, [T, start, Const(0)] + c_ops + f_ops, st, "prange")
        for k, n in enumerate(carried):
            v = self.emit(prims.part(k), [z] + c_ops, st, n)
            if n in sums:
                self.write(n, self.cur, v)
            else:
                base = self._read(self.resolve(n)[1].prefix + n, self.cur)
                self.blocks[self.cur].stmts.append(
                    Stmt(None, Call(SetItem(("s",)), [base, Const(None), Const(None), Const(None), v]),
                         self.src.loc(st)))

    def _no_shared_operands(self, st, carried, c_ops, f_names, f_ops, written) -> None:
        """A loop body that writes a variable and reads another name bound to the same value
        (``b = a`` before the loop) would see the two as separate operands of its step (the
        reverse emitter also refuses views of a written array read under another name)."""
        for n, c in zip(carried, c_ops):
            for m, f in zip(f_names, f_ops):
                if n in written and isinstance(c, Var) and isinstance(f, Var) and c.id == f.id:
                    raise self.unsupported(st, f"the loop writes into {n!r} and reads {m!r}, the "
                                               "same array",
                                           f"read {n!r} itself in the loop body, or copy {m!r} "
                                           "before the loop")

    def _free_operands(self, st, free: List[str], what: str) -> Tuple[List[str], List[Operand]]:
        """The names a loop body only reads, and their values here (a step's free operands)."""
        f_names, f_ops = [], []
        for n in free:
            where, fr = self.resolve(n)
            if where == "static":
                raise self.unsupported(st, f"the body of a {what} calls {n!r}, a function "
                                           "defined or passed inside differentiated code",
                                       "call module-level functions in the loop body")
            if where == "var":
                f_names.append(n)
                f_ops.append(self._read(fr.prefix + n, self.cur))
            elif self.global_slot(n, fr) is not None:
                # the step is lowered later, on its own: its free names are guarded here, and
                # a captured array is passed to it like a local (read at call time)
                value = self.lookup_global(gast.Name(id=n, ctx=gast.Load(), annotation=None,
                                                     type_comment=None), fr)
                if isinstance(value, np.ndarray):
                    f_names.append(n)
                    f_ops.append(self.hidden_param(self.global_slot(n, fr)))
        return f_names, f_ops

    def _loads_after(self, st) -> Set[str]:
        """Names the frame's function reads after the loop ``st`` (anywhere outside it when
        the loop is inside another loop)."""
        out: Set[str] = set()
        anywhere = bool(self.loops)
        end = getattr(st, "end_lineno", None) or st.lineno
        stack = [self.src.node]
        while stack:
            n = stack.pop()
            if n is st:
                continue
            if isinstance(n, gast.Name) and isinstance(n.ctx, gast.Load) and \
                    (anywhere or (getattr(n, "lineno", 0) or 0) > end):
                out.add(n.id)
            stack.extend(gast.iter_child_nodes(n))
        return out

    def _step_function(self, st, t: str, carried: List[str], free: List[str],
                       ret: Optional[List[str]] = None, kind: str = "checkpointed_step"):
        """A Python function ``step(t, *carried, *free) -> ret`` (``ret``: the carried values
        unless given; 0.0 when empty) whose source is the loop's body (registered as its
        source, with the body's lines).  A ``prange`` nested in the body runs serially
        within its iteration (as numba runs it)."""
        import copy
        names = carried if ret is None else ret
        if not names:
            ret = gast.Constant(value=0.0, kind=None)
        elif len(names) == 1:
            ret = gast.Name(id=names[0], ctx=gast.Load(), annotation=None, type_comment=None)
        else:
            ret = gast.Tuple(elts=[gast.Name(id=c, ctx=gast.Load(), annotation=None, type_comment=None)
                                   for c in names], ctx=gast.Load())
        body = [_ContinueToReturn(ret).visit(copy.deepcopy(b)) for b in st.body]
        body = [_SerialInner(self).visit(b) for b in body]
        body.append(gast.Return(value=copy.deepcopy(ret)))
        params = [gast.Name(id=p, ctx=gast.Param(), annotation=None, type_comment=None)
                  for p in [t] + carried + free]
        name = f"{kind}_{self.src.loc(st).lineno}"
        fdef = gast.FunctionDef(name=name, args=gast.arguments(
            args=params, posonlyargs=[], vararg=None, kwonlyargs=[], kw_defaults=[], kwarg=None,
            defaults=[]), body=body, decorator_list=[], returns=None, type_comment=None, type_params=[])
        for n in gast.walk(fdef):
            if hasattr(n, "lineno") and getattr(n, "lineno", None) is None:
                n.lineno, n.col_offset = st.lineno, st.col_offset
        gast.copy_location(fdef, st)
        mod = gast.Module(body=[fdef], type_ignores=[])
        pymod = ast.fix_missing_locations(gast.gast_to_ast(mod))
        code = compile(pymod, self.src.filename, "exec")
        fcode = next(c for c in code.co_consts if isinstance(c, types.CodeType))
        fn = types.FunctionType(fcode, self.globals, name)
        closure: Dict[str, Any] = {}
        fr = self.f
        while fr is not None:
            for k, v in fr.closure.items():
                closure.setdefault(k, v)
            fr = fr.parent
        fn._zyg_closure = closure
        src = _Source.__new__(_Source)
        src.fn, src.filename, src.coloff, src.lineoff, src.node = \
            fn, self.src.filename, self.src.coloff, self.src.lineoff, fdef
        _SOURCES[fn] = src
        return fn

    def stmt_Break(self, st) -> None:
        self.jump(self.loops[-1].exit)

    def stmt_Continue(self, st) -> None:
        self.jump(self.loops[-1].cont)

    def stmt_Return(self, st) -> None:
        from .lists import check_return, return_value
        v = return_value(self, st)      # a helper returning a list: its elements as an array
        if v is None:
            check_return(self, st)
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
                                   "'is None' and 'is not None' are supported on their own, not "
                               "chained; 'in' is not supported")
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
        if isinstance(node.value, str):
            from .messages import string_constant
            raise self.unsupported(node, *string_constant(self.src.node, node))
        if not isinstance(node.value, (int, float, bool, complex, type(None))):
            raise self.unsupported(node, f"constant {node.value!r} is not supported",
                                   "differentiated code works on numbers")
        return Const(node.value)

    def resolve(self, name: str):
        """Where ``name`` lives, following the lexical frames of closures:
        ``("static", value)``, ``("var", frame)`` or ``("global", frame)``."""
        fr, last = self.f, self.f
        while fr is not None:
            if name in fr.static:
                return "static", fr.static[name]
            if name in fr.locals:
                return "var", fr
            last, fr = fr, fr.parent
        return "global", last

    def read_name(self, node) -> Operand:
        name = node.id
        where, x = self.resolve(name)
        if where == "var":
            if name in x.texts:
                raise self.unsupported(node, f"the string {name!r} is used as a value",
                                       "strings in differentiated code can only be the messages of "
                                       "raise, assert or print")
            return self._read(x.prefix + name, self.cur)
        if where == "static":
            if _scalar_type(x):
                return Const(x)         # T = np.float64; np.zeros(n, T)
            raise self.unsupported(node, f"the function {name!r} is used as a value",
                                   "functions defined or passed in differentiated code can be "
                                   "called, or passed on to another function, but not stored or returned")
        value = self.lookup_global(node, x)
        if isinstance(value, np.ndarray):
            # read at call time through a hidden parameter (never differentiated)
            return self.hidden_param(self.global_slot(node.id, x))
        if isinstance(value, (int, float, bool, complex)) or value is None or _scalar_type(value):
            # numbers are compiled in as constants, guarded by value (a rebinding to another
            # value rebuilds the code); numpy scalar types are dtype arguments
            return Const(value)
        if isinstance(value, tuple) and all(isinstance(e, (int, float, bool, complex)) for e in value):
            return self.emit(MakeTuple(), [Const(e) for e in value], node)
        raise self.unsupported(node, f"global {name!r} of type {type(value).__name__} "
                                     "cannot be used as a value here",
                               "globals read by differentiated code must be numbers, tuples of "
                               "numbers or arrays")

    def expr_Name(self, node, hint) -> Operand:
        from .lists import is_list, view
        if is_list(self, node.id):
            return view(self, node.id, node)     # a list local: its buffer's filled rows
        return self.read_name(node)

    def expr_ListComp(self, node, hint) -> Operand:
        from .lists import comprehension_value
        return comprehension_value(self, node, hint)

    def global_slot(self, name: str, fr: _Frame) -> Optional[Slot]:
        """Where the free name ``name`` of frame ``fr`` is read from (None: a builtin)."""
        if name in fr.closure:
            return Slot("cell", fr.closure[name], None, name)
        if name in fr.globals:
            return Slot("dict", fr.globals, name, name)
        return None

    def lookup_global(self, node, frame: Optional[_Frame] = None) -> Any:
        """The value of a free name; every value but an array (passed as a hidden
        parameter) is recorded as a guard of the lowered code."""
        name = node.id
        fr = frame or self.f
        slot = self.global_slot(name, fr)
        if slot is None:
            if hasattr(builtins, name):
                return getattr(builtins, name)
            raise self.unsupported(node, f"name {name!r} is not defined")
        value = slot.get()
        if value is _MISSING:
            raise self.unsupported(node, f"free variable {name!r} is referenced before it is "
                                         "assigned in the enclosing function")
        if not isinstance(value, np.ndarray) and not is_stable_module(value, _LIBRARY_PACKAGES):
            self.reads.guard(slot, value)
        return value

    def static_value(self, node) -> Any:
        """Resolve a global name, a function-valued local, or an attribute chain
        (``np.sin``) to its object; None for a run-time value."""
        if isinstance(node, gast.Name):
            where, x = self.resolve(node.id)
            if where == "static":
                return x
            if where == "var":
                return None
            value = self.lookup_global(node, x)
            # an array global is a run-time value (a hidden parameter), as are its attributes
            return None if isinstance(value, np.ndarray) else value
        if isinstance(node, gast.Attribute):
            base = self.static_value(node.value)
            if base is None or isinstance(base, Closure):
                return None
            for resolve in hooks.STATIC_ATTRS:
                got = resolve(self, base, node)      # numba.cuda inside a kernel
                if got is not None:
                    return got
            from .objects import is_instance_object, static_attribute
            if is_instance_object(base):
                return static_attribute(self, base, node)     # self.helper, self.alpha
            try:
                value = getattr(base, node.attr)
            except AttributeError:
                raise self.unsupported(node, f"{getattr(base, '__name__', base)!r} has no attribute {node.attr!r}")
            if isinstance(base, types.ModuleType) and not is_stable_module(base, _LIBRARY_PACKAGES):
                # an attribute of a user module (mylib.helper): rebinding it rebuilds the code
                if isinstance(value, np.ndarray):
                    raise self.unsupported(node, f"the module array {node.attr!r} is read through "
                                                 "its module",
                                           f"import it by name (from {base.__name__} import "
                                           f"{node.attr}) or pass it as an argument")
                self.reads.guard(Slot("dict", base.__dict__, node.attr,
                                      f"{base.__name__}.{node.attr}"), value)
            return value
        return None

    def function_value(self, node) -> Any:
        """The function ``node`` denotes when it is a lambda or names a function, else None."""
        if isinstance(node, gast.Lambda):
            return self.make_closure(node)
        if isinstance(node, (gast.Name, gast.Attribute)):
            v = self.static_value(node)
            if v is not None and not isinstance(v, (int, float, bool, complex, np.ndarray, tuple,
                                                    types.ModuleType)) \
                    and not hasattr(v, "_zyg_lower_value"):      # a run-time value (cuda.threadIdx.x)
                return v
        return None

    def make_closure(self, node) -> Closure:
        args = node.args
        defaults = [self.call_arg(d) for d in args.defaults]
        kw = {a.id: self.call_arg(d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None}
        return Closure(node, self.f, defaults, kw)

    def call_arg(self, node) -> Any:
        """An argument of a call: a function (passed statically) or an operand."""
        fv = self.function_value(node)
        return fv if fv is not None else self.expr(node)

    def stmt_FunctionDef(self, st) -> None:
        if st.decorator_list:
            raise self.unsupported(st, "decorators on functions defined inside differentiated code "
                                       "are not supported", "define the decorated function at module level")
        if st.name in self.f.locals:
            raise self.unsupported(st, f"{st.name!r} is both a nested function and a variable",
                                   "give the function its own name")
        self.bind_function(st.name, self.make_closure(st), st)

    def bind_function(self, name: str, value: Any, node) -> None:
        """Bind ``name`` to a function for the rest of the frame; one definition per name
        (a loop may run the same one again), since the binding is static."""
        old = self.f.static.get(name)
        if old is not None and (isinstance(old, Closure) and isinstance(value, Closure)
                                and old.node is not value.node
                                or not (isinstance(old, Closure) or isinstance(value, Closure))
                                and old is not value
                                or isinstance(old, Closure) != isinstance(value, Closure)):
            raise self.unsupported(node, f"the function {name!r} is defined more than once",
                                   "zyg binds functions statically: give each definition its own name")
        self.f.static[name] = value

    def expr_Attribute(self, node, hint) -> Operand:
        from .objects import attribute_value, instance_of
        obj = instance_of(self, node.value)
        if obj is not None:
            return attribute_value(self, obj, node, hint)     # self.w: read at call time
        value = self.static_value(node)
        if value is None and node.attr == "flat":
            # reading a.flat (a[k] of it, or iterating) reads the elements in C order
            return self.emit(np.ravel, [self.expr(node.value)], node, hint)
        if value is None:
            # array attributes and namedtuple fields (checked once kinds are known)
            return self.emit(Attr(node.attr), [self.expr(node.value)], node, hint)
        if isinstance(value, (int, float, bool, complex)):
            return Const(value)
        if hasattr(value, "_zyg_lower_value"):
            return value._zyg_lower_value(self, node, hint)      # cuda.threadIdx.x
        if isinstance(value, type) and issubclass(value, (np.number, np.bool_)):
            return Const(value)      # a dtype: np.zeros(n, dtype=np.complex128)
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
        if len(node.ops) == 1 and isinstance(node.ops[0], (gast.Is, gast.IsNot)):
            from .nones import lower_is
            return lower_is(self, node, hint)
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
        if isinstance(node.slice, gast.Constant) and isinstance(node.slice.value, str):
            # params["w"]: a dict argument is a namedtuple of its keys (zyg/dicts.py)
            return self.emit(Attr(node.slice.value), [self.expr(node.value)], node, hint)
        base = self.expr(node.value)
        spec, ops = self.index(node.slice)
        return self.emit(GetItem(spec), [base] + ops, node, hint)

    def expr_Call(self, node, hint) -> Operand:
        if isinstance(node.func, gast.Lambda):
            fn = self.make_closure(node.func)
        else:
            fn = self.static_value(node.func)
        if getattr(fn, "_zyg_reshape", False):
            fn = np.reshape      # generated code transformed again (zyg/pullbacks/reshapes.py)
        if fn is builtins.isinstance and len(node.args) == 2 and not node.keywords:
            cls = self.static_value(node.args[1])
            if isinstance(cls, type) or isinstance(cls, tuple) and all(isinstance(c, type) for c in cls):
                # decided by the argument's kind once it is known (passes.fold_kinds)
                return self.emit(builtins.isinstance, [self.expr(node.args[0]), Const(cls)], node, hint)
        from .lists import call as list_call
        r = list_call(self, fn, node, hint)
        if r is not None:
            return r        # out.append(v), sum(out) (zyg/ssa/lists.py)
        if getattr(fn, "_zyg_accumulate", False) and len(node.args) == 2:
            # generated code transformed again: _zyg_acc(t, e) is t += reduce_like(e, t)
            reduce_like = hooks.PRIMS["reduce_like"]
            t, e = self.expr(node.args[0]), self.expr(node.args[1])
            r = self.emit(reduce_like, [e, t], node)
            return self.inplace_update(node.args[0], operator.add, t, r, node)
        if fn in _UFUNC_OPS and len(node.args) == 3 and not node.keywords and \
                isinstance(node.args[0], gast.Name) and isinstance(node.args[2], gast.Name) and \
                node.args[0].id == node.args[2].id:
            # np.add(a, b, a): the in-place update of generated code (a += b)
            t, e = self.expr(node.args[0]), self.expr(node.args[1])
            return self.inplace_update(node.args[0], _UFUNC_OPS[fn], t, e, node)
        if fn is np.copyto:
            from .desugar import lower_copyto
            return lower_copyto(self, node)
        if fn is not None or (isinstance(node.func, gast.Attribute) and node.func.attr in _METHODS):
            # np.add(x, y, c), np.exp(b, out=b), a.sum(out=c): c[...] = f(x, y), valued c
            from .desugar import lower_out_argument
            got = lower_out_argument(self, fn, node, hint,
                                     None if fn is not None else _METHODS[node.func.attr])
            if got is not None:
                return got
        if fn is builtins.print:
            from .raising import lower_print
            return lower_print(self, node)
        from .desugar import is_reduction, lower_reduction
        if is_reduction(fn, node):
            # sum(x[i] ** 2 for i in range(n)): a loop (zyg/ssa/desugar.py)
            return lower_reduction(self, fn, node, hint)
        if fn is not None and fn in hooks.FUNCTION_PRIMS:
            return self.function_call_prim(hooks.FUNCTION_PRIMS[fn], node, hint)
        for lowering in hooks.CALL_LOWERINGS:
            # zyg.grad(g)(args) / dg(args): the primitive GradOf (rules/gradcall.py)
            got = lowering(self, fn, node, hint)
            if got is not None:
                return got
        if isinstance(fn, Closure) or (fn is not None and is_user_function(fn)) or \
                isinstance(fn, types.MethodType) and is_user_function(fn.__func__):
            return self.inline(fn, node, hint)
        if fn is None and isinstance(node.func, gast.Attribute) and node.func.attr == "_replace":
            if node.args or any(k.arg is None for k in node.keywords):
                raise self.unsupported(node, "_replace() takes keyword arguments only")
            base = self.expr(node.func.value)
            return self.emit(Replace(tuple(k.arg for k in node.keywords)),
                             [base] + [self.expr(k.value) for k in node.keywords], node, hint)
        if is_namedtuple_class(fn):
            return self.namedtuple(fn, node, hint)
        if fn is None and isinstance(node.func, gast.Attribute) and node.func.attr == "astype":
            astype = hooks.PRIMS["astype"]
            dt = self.static_value(node.args[0]) if len(node.args) == 1 and not node.keywords else None
            if dt is None:
                raise self.unsupported(node, "astype() is supported with one constant dtype",
                                       "x.astype(np.float64)")
            try:
                dt = np.dtype(dt).type
            except TypeError:
                raise self.unsupported(node, f"astype({dt!r}): not a numpy dtype", "x.astype(np.float64)")
            return self.emit(astype, [self.expr(node.func.value), Const(dt)], node, hint)
        if fn is None and isinstance(node.func, gast.Attribute) and node.func.attr in _METHODS:
            # a method of an array: a.sum(axis=0) -> np.sum(a, axis=0)
            meth = _METHODS[node.func.attr]
            base = self.expr(node.func.value)
            args = [self.expr(a) for a in node.args]
            kwargs = {k.arg: self.expr(k.value) for k in node.keywords}
            if node.func.attr == "flatten":
                # always a copy (ravel is a view of a C-contiguous array): C-ordered, so
                # that writes into it are plain writes into a new array
                if args or kwargs:
                    raise self.unsupported(node, "flatten() takes no arguments here", "a.flatten()")
                c = self.emit(np.ascontiguousarray, [self.emit(np.copy, [base], node)], node)
                return self.emit(np.ravel, [c], node, hint)
            if meth is np.reshape and len(args) != 1:
                args = [self.emit(MakeTuple(), args, node)]
            elif meth is np.transpose and args:
                raise self.unsupported(node, "transpose() with axes is not supported", "use a.T")
            return self.emit(meth, [base] + args, node, hint, kwargs)
        if fn is None and isinstance(node.func, gast.Call) and \
                self.static_value(node.func.func) is builtins.type:
            # type(x)(v): a cast to x's type, resolved when the kinds are known (specialize.py)
            if len(node.func.args) != 1 or node.func.keywords or node.keywords or len(node.args) != 1 \
                    or isinstance(node.args[0], gast.Starred):
                raise self.unsupported(node, "type(x)(...) casts are supported as type(x)(v), "
                                       "with one argument", "write the type: float(v), complex(v) or int(v)")
            return self.emit(CastLike(), [self.expr(node.func.args[0]), self.expr(node.args[0])], node, hint)
        if fn is None:
            from .messages import local_call
            raise self.unsupported(node.func, *local_call(node))
        if fn is np.array or fn is np.asarray:
            return self.array_literal(fn, node, hint)
        if fn in STACKED_FNS:
            from .lists import is_list
            if fn is np.stack and len(node.args) == 1 and isinstance(node.args[0], gast.Name) and \
                    is_list(self, node.args[0].id) and \
                    all(k.arg == "axis" and isinstance(k.value, gast.Constant) and k.value.value == 0
                        for k in node.keywords):
                # np.stack(out) of a list along the first axis: the elements' new array
                return self.emit(np.array, [self.expr(node.args[0])], node, hint)
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
        args = [_call_const(a) or self.expr(a) for a in node.args]
        kwargs = {k.arg: _call_const(k.value) or self.expr(k.value) for k in node.keywords}
        if fn is np.average:
            # weights= may be differentiated: an operand (keyword operands must be constants)
            names = ("a", "axis", "weights")
            for k in names[len(args):]:
                args.append(kwargs.pop(k, Const(None)))
            if kwargs:
                raise self.unsupported(node, f"np.average(): {', '.join(kwargs)}= is not supported",
                                       "np.average(a, axis=..., weights=...)")
        if fn in (min, max) and len(args) > 2 and not kwargs:
            acc = args[0]
            for a in args[1:]:
                acc = self.emit(fn, [acc, a], node, hint)
            return acc
        if fn is builtins.range:
            raise self.unsupported(node, f"{fn.__name__}() is not supported here")
        return self.emit(fn, args, node, hint, kwargs)


    def array_literal(self, fn, node, hint, arg=None) -> Operand:
        """``np.array([x, y])``, ``np.array([[a, b], [c, d]])`` (rows stacked), and
        ``np.array(a)`` / ``np.asarray(a)`` of an array (a copy / the array itself)."""
        if arg is None:
            if len(node.args) != 1:
                raise self.unsupported(node, f"np.{fn.__name__}() takes one argument here",
                                       "np.array([x, y, z]) or np.asarray(a)")
            arg = node.args[0]
        elif not isinstance(arg, (gast.List, gast.Tuple)):
            raise self.unsupported(arg, "a nested list literal needs lists at every level",
                                   "np.array([[a, b], [c, d]])")
        if not isinstance(arg, (gast.List, gast.Tuple)):
            kwargs = {k.arg: self.expr(k.value) for k in node.keywords}
            if set(kwargs) - {"dtype"}:
                raise self.unsupported(node, f"np.{fn.__name__}(): only dtype= is supported")
            from .lists import is_list
            if fn is np.asarray and isinstance(arg, gast.Name) and is_list(self, arg.id):
                fn = np.array       # a Python list is never the array's memory: a new array
            return self.emit(fn, [self.expr(arg)], node, hint, kwargs)
        if node.keywords:
            raise self.unsupported(node, f"np.{fn.__name__}() of a literal list takes no keywords here",
                                   "np.array([x, y, z])")
        if arg.elts and all(isinstance(e, (gast.List, gast.Tuple)) for e in arg.elts):
            rows = [self.array_literal(fn, node, "", e) for e in arg.elts]
            return self.emit(Stacked(np.stack), rows, node, hint, {})
        if any(isinstance(e, (gast.List, gast.Tuple)) for e in arg.elts):
            raise self.unsupported(node, "a nested list literal needs lists at every level",
                                   "np.array([[a, b], [c, d]])")
        return self.emit(ArrayOf(), [self.expr(e) for e in arg.elts], node, hint)

    # -- calls of user functions and closures: inlined ------------------------------
    def inline(self, fn: Any, node, hint: str) -> Operand:
        """Lower a call of a user function or closure by lowering its body in place.

        The callee's locals live in a frame of their own; arguments are bound by
        Python's rules (positional, keywords, defaults, ``*`` of a tuple).
        """
        pre: List[Any] = []
        if isinstance(fn, types.MethodType):
            pre, fn = [fn.__self__], fn.__func__        # self.helper(x): self bound statically
        if isinstance(fn, Closure):
            fdef, src, parent, what = fn.node, fn.frame.src, fn.frame, fn.node
            glob, cells = fn.frame.globals, fn.frame.closure
            defaults, kwdefaults = fn.defaults, fn.kw_defaults
            name = fn.__name__
        else:
            py = unwrap(fn)
            src = source_of(py)
            fdef, parent, what = src.node, None, py
            glob, cells = py.__globals__, _cells(py)
            defaults = [self.default_value(py, k, v, node) for k, v in enumerate(py.__defaults__ or ())]
            kwdefaults = {k: self.python_value(v, node) for k, v in (py.__kwdefaults__ or {}).items()}
            name = py.__qualname__
        if any(fr.what is what for fr in self.frames):
            return self.recursive_call(fn, fdef, name, node, hint, defaults, kwdefaults)
        if len(self.frames) > MAX_INLINE_DEPTH:
            raise self.unsupported(node, f"calls nested more than {MAX_INLINE_DEPTH} deep")
        bound = self.bind_args(fdef, name, node, defaults, kwdefaults, pre)
        self.ninline += 1
        frame = _Frame(src, glob, cells, f"{self.ninline}:", parent, what)
        a = fdef.args
        frame.locals = {x.id for x in a.posonlyargs + a.args + a.kwonlyargs}
        if isinstance(fdef, gast.FunctionDef):
            frame.texts = _text_locals(fdef, set(frame.locals))
            frame.nullable = _none_locals(fdef)
            frame.locals |= self._assigned_names(fdef)
        for p, v in bound.items():
            if isinstance(v, (Var, Const)):
                if p in frame.nullable:     # def helper(x, best=None): ... best = None
                    none = isinstance(v, Const) and not isinstance(v, Undef) and v.value is None
                    self.defs[self.cur][frame.prefix + p + ".none"] = Const(none)
                    v = Undef() if none else v
                self.defs[self.cur][frame.prefix + p] = v
            else:
                frame.static[p] = v
        caller = self.f
        self.frames.append(frame)
        self.f = frame
        try:
            if isinstance(fdef, gast.Lambda):
                return self.expr(fdef.body, hint)
            frame.exit = self.new_block(fdef)
            self.stmts(fdef.body)
            if self.cur is not None:
                self.write(".ret", self.cur, Const(None))
                self.jump(frame.exit)
            self.seal(frame.exit)
            self.cur = frame.exit
            r = self.read(".ret", frame.exit)
            if frame.returns_list and isinstance(r, Var):
                self.list_results.add(r.id)     # l = helper(x): l is a list (lists.py)
            return r
        finally:
            self.frames.pop()
            self.f = caller

    def inplace_update(self, target_node, op, t: Operand, e: Operand, node) -> Operand:
        """``t op= e`` in place; a name target is rebound to the result (as ``x op= y``)."""
        v = self.emit(InPlace(op), [t, e], node)
        if isinstance(target_node, gast.Name):
            where, fr = self.resolve(target_node.id)
            if where == "var":
                self.defs[self.cur][fr.prefix + target_node.id] = v
        return v

    def namedtuple(self, cls, node, hint: str) -> Operand:
        """``State(x, v=...)``: a tuple of the fields in order (defaults filled in)."""
        fields = list(cls._fields)
        vals: Dict[str, Operand] = {}
        if len(node.args) > len(fields) or any(isinstance(a, gast.Starred) for a in node.args):
            raise self.unsupported(node, f"{cls.__name__}() takes {len(fields)} fields, passed by "
                                         "position or keyword")
        for f, a in zip(fields, node.args):
            vals[f] = self.expr(a)
        for k in node.keywords:
            if k.arg not in fields or k.arg in vals:
                raise self.unsupported(node, f"{cls.__name__}() got an unexpected or repeated "
                                             f"field {k.arg!r}")
            vals[k.arg] = self.expr(k.value)
        defaults = getattr(cls, "_field_defaults", {})
        for f in fields:
            if f not in vals:
                if f not in defaults:
                    raise self.unsupported(node, f"{cls.__name__}() is missing the field {f!r}")
                vals[f] = self.python_value(defaults[f], node)
        return self.emit(MakeTuple(cls), [vals[f] for f in fields], node, hint)

    def function_call_prim(self, prim: "hooks.FunctionPrim", node, hint: str) -> Operand:
        """``zyg.hook(f, x)`` / ``zyg.checkpoint(f, *args)``: ``f`` bound statically."""
        what = prim.name
        if not node.args or node.keywords or any(isinstance(a, gast.Starred) for a in node.args):
            raise self.unsupported(node, f"zyg.{what}(f, ...) takes a function and positional arguments")
        f = self.function_value(node.args[0])
        if f is None or isinstance(f, Closure):
            raise self.unsupported(node.args[0], f"the first argument of zyg.{what} must be a function "
                                                 "defined at module level",
                                   "numba compiles it separately from the differentiated code")
        args = [self.expr(a) for a in node.args[1:]]
        if prim.nargs is not None and len(args) != prim.nargs:
            raise self.unsupported(node, f"zyg.{what}(f, x) takes "
                                         f"{'one value' if prim.nargs == 1 else f'{prim.nargs} values'}")
        return self.emit(prim.make(f), args, node, hint)

    def recursive_call(self, fn, fdef, name: str, node, hint: str, defaults, kwdefaults) -> Operand:
        """A call of a function that is being inlined already: a real call, through the
        callee's own pullback at run time (``zyg/nested/recursion.py``)."""
        if isinstance(fn, Closure):
            raise self.unsupported(node, f"recursive call of the nested function {name!r}: "
                                         "recursion is supported for module-level functions",
                                   "define the recursive function at module level")
        bound = self.bind_args(fdef, name, node, defaults, kwdefaults)
        a = fdef.args
        order = [x.id for x in a.posonlyargs + a.args + a.kwonlyargs]
        args = [bound[p] for p in order]
        if any(not isinstance(v, (Var, Const)) for v in args):
            raise self.unsupported(node, f"recursive call of {name!r} with a function argument "
                                         "is not supported")
        if a.kwonlyargs:
            raise self.unsupported(node, f"recursive call of {name!r}: keyword-only parameters "
                                         "are not supported in recursive functions")
        return self.emit(Recursive(unwrap(fn)), args, node, hint)

    def default_value(self, py, k: int, v: Any, node) -> Any:
        """The ``k``-th default value of the inlined function ``py``: an array is read at
        call time (a hidden parameter); anything else is a guarded constant."""
        slot = Slot("default", py, k, f"{py.__qualname__}.__defaults__[{k}]")
        if isinstance(v, np.ndarray):
            return self.hidden_param(slot)
        self.reads.guard(slot, v)
        return self.python_value(v, node)

    def python_value(self, v: Any, node) -> Any:
        """A Python default value as an operand, or a function passed statically."""
        if isinstance(v, (int, float, bool, complex, np.ndarray, np.number)) or v is None:
            return Const(v)
        if isinstance(v, tuple):
            return self.emit(MakeTuple(), [self.python_value(e, node) for e in v], node)
        if callable(v):
            return v
        raise self.unsupported(node, f"a default value of type {type(v).__name__} is not supported")

    def bind_args(self, fdef, name: str, node, defaults: List[Any], kwdefaults: Dict[str, Any],
                  pre: Optional[List[Any]] = None) -> Dict[str, Any]:
        a = fdef.args
        if a.vararg is not None or a.kwarg is not None:
            raise self.unsupported(node, f"{name!r} has *args or **kwargs parameters, which zyg "
                                         "cannot inline", "give it explicit parameters")
        params = [x.id for x in a.posonlyargs + a.args]
        kwonly = [x.id for x in a.kwonlyargs]
        kw: Dict[str, Any] = {}
        for k in node.keywords:
            if k.arg is None:
                raise self.unsupported(node, "'**' unpacking in calls is not supported")
            kw[k.arg] = self.call_arg(k.value)
        pos: List[Any] = list(pre or ())
        star = None
        for x in node.args:
            if isinstance(x, gast.Starred):
                if isinstance(x.value, (gast.Tuple, gast.List)):
                    pos.extend(self.call_arg(e) for e in x.value.elts)
                elif star is not None:
                    raise self.unsupported(x, "only one '*' of a tuple variable per call is supported")
                else:
                    star = (len(pos), self.expr(x.value))
            else:
                pos.append(self.call_arg(x))
        if star is not None:
            # the tuple fills the positional parameters that nothing else fills
            n = len([p for p in params[len(pos):] if p not in kw])
            at, tup = star
            pos[at:at] = [self.emit(GetItem(("i",)), [tup, Const(k)], node) for k in range(n)]
        if len(pos) > len(params):
            raise self.unsupported(node, f"{name}() takes {len(params)} positional arguments "
                                         f"but {len(pos)} were given")
        bound = dict(zip(params, pos))
        for k, v in kw.items():
            if k in bound:
                raise self.unsupported(node, f"{name}() got multiple values for argument {k!r}")
            if k not in params and k not in kwonly:
                raise self.unsupported(node, f"{name}() got an unexpected keyword argument {k!r}")
            bound[k] = v
        first_default = len(params) - len(defaults)
        for j, p in enumerate(params):
            if p not in bound:
                if j < first_default:
                    raise self.unsupported(node, f"{name}() is missing the argument {p!r}")
                bound[p] = defaults[j - first_default]
        for p in kwonly:
            if p not in bound:
                if p not in kwdefaults:
                    raise self.unsupported(node, f"{name}() is missing the keyword argument {p!r}")
                bound[p] = kwdefaults[p]
        return bound


def _none_locals(fdef) -> Set[str]:
    """The names ``fdef`` assigns the constant ``None`` (``best = None``), and its
    parameters whose default is ``None``."""
    out: Set[str] = set()
    a = fdef.args
    pos = a.posonlyargs + a.args
    for p, d in list(zip(pos[len(pos) - len(a.defaults):], a.defaults)) + list(zip(a.kwonlyargs, a.kw_defaults)):
        if isinstance(d, gast.Constant) and d.value is None:
            out.add(p.id)
    stack = list(fdef.body if isinstance(fdef.body, list) else [fdef.body])
    while stack:
        n = stack.pop()
        if isinstance(n, (gast.FunctionDef, gast.Lambda, gast.ClassDef)):
            continue
        if isinstance(n, (gast.Assign, gast.AnnAssign)) and isinstance(n.value, gast.Constant) \
                and n.value.value is None:
            for t in (n.targets if isinstance(n, gast.Assign) else [n.target]):
                if isinstance(t, gast.Name):
                    out.add(t.id)
        stack.extend(gast.iter_child_nodes(n))
    return out


def _text_locals(fdef, params: Set[str]) -> Dict[str, Optional[str]]:
    """The locals of ``fdef`` that every assignment sets to a string constant
    (``msg = "Failed to converge"``), with their text (None: different texts)."""
    texts: Dict[str, Optional[str]] = {}
    others: Set[str] = set(params)
    stack = list(fdef.body if isinstance(fdef.body, list) else [fdef.body])
    while stack:
        n = stack.pop()
        if isinstance(n, (gast.FunctionDef, gast.Lambda, gast.ClassDef)):
            continue
        if isinstance(n, gast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], gast.Name) \
                and isinstance(n.value, gast.Constant) and isinstance(n.value.value, str):
            name, text = n.targets[0].id, n.value.value
            texts[name] = text if texts.get(name, text) == text else None
            continue
        if isinstance(n, gast.Name) and isinstance(n.ctx, gast.Store):
            others.add(n.id)
        stack.extend(gast.iter_child_nodes(n))
    return {k: v for k, v in texts.items() if k not in others}


def _int_const(node) -> Optional[int]:
    if isinstance(node, gast.Constant) and type(node.value) is int:
        return node.value
    if (isinstance(node, gast.UnaryOp) and isinstance(node.op, gast.USub)
            and isinstance(node.operand, gast.Constant) and type(node.operand.value) is int):
        return -node.operand.value
    return None


def _const_assign(st, var: str) -> Optional[int]:
    """``c`` when ``st`` is ``var = c`` with ``c`` an int literal."""
    if (isinstance(st, gast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], gast.Name)
            and st.targets[0].id == var):
        return _int_const(st.value)
    return None


def _dispatch_shape(st):
    """``(var, cases, orelse)`` when the loop ``st`` is ``while var >= 0:`` whose body is one
    ``if var == k1: ... elif var == k2: ...`` chain on int literals, else None."""
    t = st.test
    if not (isinstance(t, gast.Compare) and len(t.ops) == 1 and isinstance(t.ops[0], gast.GtE)
            and isinstance(t.left, gast.Name) and _int_const(t.comparators[0]) == 0):
        return None
    var = t.left.id
    if len(st.body) != 1 or not isinstance(st.body[0], gast.If):
        return None
    cases: list = []
    node = st.body[0]
    while True:
        c = node.test
        if not (isinstance(c, gast.Compare) and len(c.ops) == 1 and isinstance(c.ops[0], gast.Eq)
                and isinstance(c.left, gast.Name) and c.left.id == var
                and isinstance(c.comparators[0], gast.Constant)
                and type(c.comparators[0].value) is int):
            return None
        cases.append(node)
        if len(node.orelse) == 1 and isinstance(node.orelse[0], gast.If):
            node = node.orelse[0]
            continue
        return var, cases, list(node.orelse)


class _BodyScan:
    """What a loop body reads and writes: ``loads``, ``stores`` (names assigned),
    ``mutated`` (arrays written through a subscript) and ``exposed`` (names read before
    the body assigns them on some path: values carried from the previous iteration)."""

    def __init__(self, low: "Lowerer", body, what: str = "checkpointed loop"):
        self.low = low
        self.what = what
        self.loads: Set[str] = set()
        self.stores: Set[str] = set()
        self.mutated: Set[str] = set()
        self.exposed: Set[str] = set()
        self.block(body, set(), top=True)

    def read(self, node, defined: Set[str]) -> None:
        for n in gast.walk(node):
            if isinstance(n, gast.Name) and isinstance(n.ctx, gast.Load):
                self.loads.add(n.id)
                if n.id not in defined:
                    self.exposed.add(n.id)

    def target(self, t, defined: Set[str]) -> None:
        if isinstance(t, gast.Name):
            self.stores.add(t.id)
            defined.add(t.id)
        elif isinstance(t, (gast.Tuple, gast.List)):
            for e in t.elts:
                self.target(e, defined)
        elif isinstance(t, gast.Subscript):
            base = t.value
            while isinstance(base, (gast.Subscript, gast.Attribute)):
                base = base.value
            if isinstance(base, gast.Name):
                self.mutated.add(base.id)
            self.read(t.value, defined)
            self.read(t.slice, defined)
        elif isinstance(t, gast.Starred):
            self.target(t.value, defined)
        else:
            self.read(t, defined)

    def block(self, body, defined: Set[str], top: bool = False) -> Set[str]:
        for st in body:
            if isinstance(st, gast.Return):
                raise self.low.unsupported(st, f"'return' inside a {self.what} is not supported",
                                           "set a flag, finish the loop, and return after it")
            if isinstance(st, gast.Break) and top:
                raise self.low.unsupported(st, f"'break' out of a {self.what} is not supported",
                                           f"a {self.what} runs all its iterations")
            if isinstance(st, gast.Assign):
                self.read(st.value, defined)
                for t in st.targets:
                    self.target(t, defined)
            elif isinstance(st, gast.AugAssign):
                self.read(st.value, defined)
                if isinstance(st.target, gast.Name):
                    self.loads.add(st.target.id)
                    if st.target.id not in defined:
                        self.exposed.add(st.target.id)
                self.target(st.target, defined)
            elif isinstance(st, gast.AnnAssign):
                if st.value is not None:
                    self.read(st.value, defined)
                    self.target(st.target, defined)
            elif isinstance(st, gast.If):
                self.read(st.test, defined)
                a = self.block(st.body, set(defined), top)
                b = self.block(st.orelse, set(defined), top)
                defined |= a & b
            elif isinstance(st, gast.For):
                self.read(st.iter, defined)
                inner = set(defined)
                self.target(st.target, inner)
                self.block(st.body, inner)
                self.block(st.orelse, set(defined))
            elif isinstance(st, gast.While):
                self.read(st.test, defined)
                self.block(st.body, set(defined))
                self.block(st.orelse, set(defined))
            elif isinstance(st, gast.FunctionDef):
                self.read(st, defined)
                self.stores.add(st.name)
                defined.add(st.name)
            else:
                for n in gast.walk(st):
                    if isinstance(n, gast.Return):
                        raise self.low.unsupported(n, f"'return' inside a {self.what} is not "
                                                      "supported")
                self.read(st, defined)
        return defined


def _mentions(node, name: str) -> bool:
    return any(isinstance(n, gast.Name) and n.id == name for n in gast.walk(node))


_MINMAX = {builtins.max: "max", builtins.min: "min", np.maximum: "max", np.minimum: "min",
           np.fmax: "max", np.fmin: "min"}


def _minmax(f) -> Optional[str]:
    try:
        return _MINMAX.get(f)
    except TypeError:           # an unhashable value
        return None


def _reduction(body, name: str, static_value):
    """How ``body`` reduces ``name``: ``("sum", None)`` for ``name += e``, ``name -= e``,
    ``name = name + e``, ``name = name - e``, ``name = e + name``; ``("max", None)`` or
    ``("min", None)`` for ``name = max(name, e)`` / ``max(e, name)`` (``min``,
    ``np.maximum``...) -- ``e`` never reading ``name``, one kind throughout; else
    ``(None, node)``, the first place where it is used otherwise."""
    ok: Set[int] = set()
    kinds: Set[str] = set()
    for b in body:
        for n in gast.walk(b):
            if isinstance(n, gast.AugAssign) and isinstance(n.target, gast.Name) and n.target.id == name:
                if not isinstance(n.op, (gast.Add, gast.Sub)) or _mentions(n.value, name):
                    return None, n
                ok.add(id(n.target))
                kinds.add("sum")
            elif isinstance(n, gast.Assign) and len(n.targets) == 1 and \
                    isinstance(n.targets[0], gast.Name) and n.targets[0].id == name:
                v = n.value
                if isinstance(v, gast.Call) and not v.keywords and len(v.args) == 2 and \
                        _minmax(static_value(v.func)) is not None:
                    mine = [isinstance(a, gast.Name) and a.id == name for a in v.args]
                    if mine.count(True) != 1 or _mentions(v.args[mine.index(False)], name):
                        return None, n
                    ok.update((id(n.targets[0]), id(v.args[mine.index(True)])))
                    kinds.add(_minmax(static_value(v.func)))
                    continue
                if not isinstance(v, gast.BinOp):
                    return None, n
                left = isinstance(v.left, gast.Name) and v.left.id == name
                right = isinstance(v.right, gast.Name) and v.right.id == name
                if left and isinstance(v.op, (gast.Add, gast.Sub)) and not _mentions(v.right, name):
                    ok.update((id(n.targets[0]), id(v.left)))
                elif right and isinstance(v.op, gast.Add) and not _mentions(v.left, name):
                    ok.update((id(n.targets[0]), id(v.right)))
                else:
                    return None, n
                kinds.add("sum")
    for b in body:
        for n in gast.walk(b):
            if isinstance(n, gast.Name) and n.id == name and id(n) not in ok:
                return None, n
    if len(kinds) != 1:
        return None, next((m for b in body for m in gast.walk(b)
                           if isinstance(m, gast.Name) and m.id == name), None)
    return kinds.pop(), None


def _reads_elsewhere(body, name: str) -> bool:
    """Does ``body`` read array ``name`` other than at an index it also assigns (or pass the
    whole array somewhere)?  Then two iterations may read one element, and the adjoint's
    additions into its shadow there would race."""
    stores, loads, parents = set(), [], {}
    for b in body:
        for n in gast.walk(b):
            for c in gast.iter_child_nodes(n):
                parents[id(c)] = n
    for b in body:
        for n in gast.walk(b):
            if not (isinstance(n, gast.Name) and n.id == name):
                continue
            p = parents.get(id(n))
            if isinstance(p, gast.Subscript) and p.value is n:
                key = gast.dump(p.slice)
                if isinstance(p.ctx, gast.Store):
                    stores.add(key)
                else:
                    loads.append(key)
            else:
                return True
    return any(k not in stores for k in loads)


def _indexed_by(body, name: str, t: str) -> bool:
    """Is array ``name`` only ever subscripted in ``body`` with the loop variable ``t`` as its
    first index (``a[i]``, ``a[i, j]``)?  Then no two iterations touch one of its elements."""
    parents = {}
    for b in body:
        for n in gast.walk(b):
            for c in gast.iter_child_nodes(n):
                parents[id(c)] = n
    seen = False
    for b in body:
        for n in gast.walk(b):
            if not (isinstance(n, gast.Name) and n.id == name):
                continue
            p = parents.get(id(n))
            if not (isinstance(p, gast.Subscript) and p.value is n):
                return False
            first = p.slice.elts[0] if isinstance(p.slice, gast.Tuple) and p.slice.elts else p.slice
            if not (isinstance(first, gast.Name) and first.id == t):
                return False
            seen = True
    return seen


def _scattered(body, name: str, t: str) -> bool:
    """Is array ``name`` subscripted in ``body`` only with indices that depend on the loop
    variable ``t`` (``u[(i + 1) % n]``, ``x[idx[i]]``, ``x[k]`` after ``k = idx[i]``)?
    Then the iterations' reads spread over its elements, and its shadow takes atomic
    additions rather than a row per thread (which all iterations hitting the same
    elements, as shared parameters, need)."""
    dep = {t}
    for _ in range(8):              # names assigned from the loop variable, transitively
        for b in body:
            for n in gast.walk(b):
                if isinstance(n, (gast.Assign, gast.AugAssign)):
                    targets = n.targets if isinstance(n, gast.Assign) else [n.target]
                    if any(isinstance(m, gast.Name) and m.id in dep for m in gast.walk(n.value)):
                        for tg in targets:
                            if isinstance(tg, gast.Name):
                                dep.add(tg.id)
    seen = False
    for b in body:
        for n in gast.walk(b):
            if isinstance(n, gast.Subscript) and isinstance(n.value, gast.Name) and n.value.id == name:
                if not any(isinstance(m, gast.Name) and m.id in dep for m in gast.walk(n.slice)):
                    return False
                seen = True
    return seen


class _SerialInner(gast.NodeTransformer):
    """``for j in prange(...)`` nested in a parallel loop's body: a plain ``range``."""

    def __init__(self, low: "Lowerer"):
        self.low = low

    def visit_For(self, node):
        self.generic_visit(node)
        it = node.iter
        if isinstance(it, gast.Call):
            fn = self.low.static_value(it.func)
            if fn is not None and fn in hooks.LOOPS and hooks.LOOPS[fn].parallel:
                it.func = gast.Name(id="range", ctx=gast.Load(), annotation=None, type_comment=None)
        return node


class _ContinueToReturn(gast.NodeTransformer):
    """``continue`` of the checkpointed loop itself (not of a nested loop) ends the step."""

    def __init__(self, ret):
        self.ret = ret

    def visit_Continue(self, node):
        import copy
        return gast.copy_location(gast.Return(value=copy.deepcopy(self.ret)), node)

    def visit_For(self, node):
        return node

    def visit_While(self, node):
        return node

    def visit_FunctionDef(self, node):
        return node

    def visit_Lambda(self, node):
        return node


def lower(pyfn: Any, statics: Optional[Dict[int, Any]] = None) -> Function:
    """Parse and lower ``pyfn`` to SSA (before cleanup passes); ``statics`` maps argument
    positions to the functions passed there (inlined, not parameters)."""
    return Lowerer(pyfn, statics).lower()
