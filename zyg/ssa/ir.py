"""zyg's SSA intermediate representation.

A :class:`Function` is a set of :class:`Block` objects with stable integer ids
and a separate block order.  Blocks take parameters (block arguments replace
phi nodes); a block holds straight-line :class:`Stmt` objects and ends in one
terminator: :class:`Jump`, :class:`Branch` or :class:`Return`.  Values are
:class:`Var` (defined once) or :class:`Const`.

The printer follows the IRTools style::

    1: (%1 x, %2 n)
      %3 = %2 > 0
      br %3 ? 2(%2, 1.0) : 3(1.0)
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple, Union


class Var:
    """An SSA value.  ``hint`` is the source name it came from (for printing)."""

    __slots__ = ("id", "hint")

    def __init__(self, id: int, hint: str = ""):
        self.id = id
        self.hint = hint

    def __repr__(self) -> str:
        return f"%{self.id}"

    __str__ = __repr__


class Const:
    """A constant operand (a Python number, bool or None)."""

    __slots__ = ("value",)

    def __init__(self, value: Any):
        self.value = value

    def __repr__(self) -> str:
        return repr(self.value)

    __str__ = __repr__

    def __eq__(self, other) -> bool:
        return (isinstance(other, Const) and type(other.value) is type(self.value)
                and other.value == self.value)

    def __hash__(self) -> int:
        return hash((type(self.value), self.value))


class Undef(Const):
    """The value of a variable read on a path where it was never assigned."""

    def __init__(self):
        super().__init__(None)

    def __repr__(self) -> str:
        return "undef"

    __str__ = __repr__

    def __eq__(self, other) -> bool:
        return isinstance(other, Undef)

    def __hash__(self) -> int:
        return 0


Operand = Union[Var, Const]


@dataclass
class Loc:
    """A location in the user's source file."""
    filename: str
    lineno: int
    col: int = 0

    def __str__(self) -> str:
        return f"{self.filename}:{self.lineno}"


def _public_name(fn: Any) -> Optional[str]:
    """The spelling a user writes for a numpy or scipy function: ``np.linalg.solve``, not the
    module it is defined in (``numpy.linalg``), so that a hint ``@zyg.adjoint(np.linalg.solve)``
    names something that exists.  None for anything else."""
    import sys
    name = getattr(fn, "__name__", None)
    if not isinstance(name, str):
        return None
    spaces = [("np", "numpy"), ("np.linalg", "numpy.linalg"), ("np.fft", "numpy.fft"),
              ("scipy.special", "scipy.special"), ("scipy.linalg", "scipy.linalg")]
    for spelled, modname in spaces:
        mod = sys.modules.get(modname)      # only modules the user's code has imported
        try:
            if mod is not None and getattr(mod, name, None) is fn:
                return f"{spelled}.{name}"
        except Exception:       # a lazy module that fails to load an attribute
            continue
    return None


def callee_name(fn: Any) -> str:
    """A readable name for a callee object (``math.sin``, ``operator.mul``)."""
    from .prims import Prim
    if isinstance(fn, Prim):
        return fn.name
    public = _public_name(fn)
    if public is not None:
        return public
    mod = getattr(fn, "__module__", None) or ""
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)
    if mod in ("_operator", "operator"):
        mod = "operator"
    elif mod == "numpy.linalg" or mod.startswith("numpy.linalg."):
        mod = "np.linalg"       # not np.solve: that name does not exist
    elif mod == "numpy" or mod.startswith("numpy."):
        mod = "np"
    elif mod == "builtins":
        return name
    elif "._" in mod:
        mod = mod[:mod.index("._")]     # scipy.linalg, not scipy.linalg._basic
    return f"{mod}.{name}" if mod else name


@dataclass
class Call:
    """Call of a Python object ``fn`` on operands (the only expression kind)."""
    fn: Any
    args: List[Operand]
    kwargs: Dict[str, Operand] = field(default_factory=dict)

    def operands(self) -> List[Operand]:
        return list(self.args) + list(self.kwargs.values())

    def __str__(self) -> str:
        return format_call(self)


@dataclass
class Stmt:
    """``var = expr``; ``var`` is None for an effect."""
    var: Optional[Var]
    expr: Call
    loc: Optional[Loc] = None

    def __str__(self) -> str:
        if self.var is None:
            return str(self.expr)
        return f"{self.var} = {self.expr}"


@dataclass
class Jump:
    target: int
    args: List[Operand]

    def successors(self) -> List[Tuple[int, List[Operand]]]:
        return [(self.target, self.args)]

    def __str__(self) -> str:
        return f"br {self.target}({', '.join(map(str, self.args))})"


@dataclass
class Branch:
    cond: Operand
    true: int
    true_args: List[Operand]
    false: int
    false_args: List[Operand]

    def successors(self) -> List[Tuple[int, List[Operand]]]:
        return [(self.true, self.true_args), (self.false, self.false_args)]

    def __str__(self) -> str:
        t = f"{self.true}({', '.join(map(str, self.true_args))})"
        f = f"{self.false}({', '.join(map(str, self.false_args))})"
        return f"br {self.cond} ? {t} : {f}"


@dataclass
class Return:
    value: Operand

    def successors(self) -> List[Tuple[int, List[Operand]]]:
        return []

    def __str__(self) -> str:
        return f"return {self.value}"


Terminator = Union[Jump, Branch, Return]


@dataclass
class Block:
    id: int
    params: List[Var] = field(default_factory=list)
    stmts: List[Stmt] = field(default_factory=list)
    term: Optional[Terminator] = None
    loc: Optional[Loc] = None

    def successors(self) -> List[int]:
        return [t for t, _ in self.term.successors()] if self.term else []

    def __str__(self) -> str:
        return format_block(self)


@dataclass
class Function:
    """An SSA function.  ``order`` lists block ids; ``order[0]`` is the entry."""
    name: str
    blocks: Dict[int, Block]
    order: List[int]
    filename: str = "<unknown>"
    firstlineno: int = 1
    argnames: List[str] = field(default_factory=list)
    # what the function reads besides its arguments (zyg.ssa.captured.Reads): the arrays
    # passed as trailing hidden parameters, and the guards of statically resolved values
    reads: Any = None

    @property
    def nargs(self) -> int:
        """The number of the user's parameters (the entry block's other ones are hidden)."""
        return len(self.params) - (len(self.reads.hidden) if self.reads is not None else 0)

    @property
    def entry(self) -> Block:
        return self.blocks[self.order[0]]

    @property
    def params(self) -> List[Var]:
        return self.entry.params

    def iter_blocks(self):
        for b in self.order:
            yield self.blocks[b]

    def predecessors(self) -> Dict[int, List[int]]:
        """Predecessor edges of every block, one entry per edge, in block order."""
        preds: Dict[int, List[int]] = {b: [] for b in self.order}
        for blk in self.iter_blocks():
            for succ in blk.successors():
                preds[succ].append(blk.id)
        return preds

    def __str__(self) -> str:
        return format_function(self)


# -- the text form (IRTools style; used by ``zyg.show`` and golden tests) ----------------

_INFIX = {
    "operator.add": "+", "operator.sub": "-", "operator.mul": "*",
    "operator.truediv": "/", "operator.floordiv": "//", "operator.mod": "%",
    "operator.pow": "**", "operator.lt": "<", "operator.le": "<=",
    "operator.gt": ">", "operator.ge": ">=", "operator.eq": "==",
    "operator.ne": "!=", "operator.and_": "&", "operator.or_": "|", "operator.xor": "^",
    "operator.lshift": "<<", "operator.rshift": ">>",
}
_PREFIX = {"operator.neg": "-", "operator.pos": "+", "operator.not_": "!", "operator.invert": "~"}


def format_call(call: Call) -> str:
    from .prims import InPlace
    if isinstance(call.fn, InPlace) and len(call.args) == 2:
        # in place on arrays, the plain operation on numbers (decided once types are known)
        return f"{call.args[0]} {InPlace.SYMBOL.get(call.fn.op, '?=')} {call.args[1]}"
    name = callee_name(call.fn)
    args = [str(a) for a in call.args]
    if name in _INFIX and len(args) == 2 and not call.kwargs:
        return f"{args[0]} {_INFIX[name]} {args[1]}"
    if name in _PREFIX and len(args) == 1 and not call.kwargs:
        return f"{_PREFIX[name]}{args[0]}"
    args += [f"{k}={v}" for k, v in call.kwargs.items()]
    return f"{name}({', '.join(args)})"


def _param(v: Var) -> str:
    return f"{v} {v.hint}" if v.hint and not v.hint.startswith(".") else str(v)


def format_block(blk: Block) -> str:
    lines = [f"{blk.id}: ({', '.join(_param(p) for p in blk.params)})"]
    for st in blk.stmts:
        lines.append(f"  {st}")
    lines.append(f"  {blk.term}" if blk.term is not None else "  <no terminator>")
    return "\n".join(lines)


def format_function(fn: Function) -> str:
    head = f"function {fn.name}  # {fn.filename}:{fn.firstlineno}"
    return "\n".join([head] + [format_block(b) for b in fn.iter_blocks()])
