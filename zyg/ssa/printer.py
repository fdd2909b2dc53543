"""Text form of the IR, in the IRTools style (used by ``zyg.show`` and golden tests)."""
from __future__ import annotations

from .ir import Block, Call, Function, Var, callee_name

_INFIX = {
    "operator.add": "+", "operator.sub": "-", "operator.mul": "*",
    "operator.truediv": "/", "operator.floordiv": "//", "operator.mod": "%",
    "operator.pow": "**", "operator.lt": "<", "operator.le": "<=",
    "operator.gt": ">", "operator.ge": ">=", "operator.eq": "==",
    "operator.ne": "!=",
}
_PREFIX = {"operator.neg": "-", "operator.pos": "+", "operator.not_": "!"}


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
