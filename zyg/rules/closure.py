"""Closure conversion of ``@adjoint`` rules.

A rule ``def r(x): <forward>; def back(dy): <backward>; return y, back`` is turned
into pieces the emitter can inline, so that no Python closure exists at run time:

* the *forward expression* (when the forward part is a single ``y = expr``, the
  common case) is substituted into the primal; otherwise a ``fwd`` function
  returning ``(y, *residuals)`` is generated;
* the free variables of ``back`` become the residuals (rule parameters, the
  output ``y``, or forward locals);
* the *backward expressions* (when ``back`` is a single ``return (e1, e2, ...)``)
  are substituted into the adjoint; otherwise a ``bwd`` function is generated.
"""
from __future__ import annotations

import ast
import builtins
import inspect
import textwrap
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Set

import gast

from ..errors import UnsupportedSyntax


@dataclass
class ConvertedRule:
    name: str
    params: List[str]
    out: Optional[str]                       # name of the primal output in the forward part
    fwd_expr: Optional[ast.expr]             # simple forward: y = fwd_expr
    back_param: str
    back_exprs: Optional[List[Optional[ast.expr]]]   # simple backward, None entry = no gradient
    free: List[str]                          # free variables of back (residual names)
    fwd_src: Optional[str] = None            # general case: source of a fwd function
    bwd_src: Optional[str] = None            # general case: source of a bwd function
    nonzero: List[bool] = field(default_factory=list)   # which back entries may be non-None
    extra_res: List[str] = field(default_factory=list)  # forward locals returned by fwd
    globals: Dict[str, Any] = field(default_factory=dict)
    filename: str = ""
    lineno: int = 0


def _names_loaded(node) -> Set[str]:
    return {n.id for n in gast.walk(node) if isinstance(n, gast.Name) and isinstance(n.ctx, gast.Load)}


def _names_stored(nodes) -> Set[str]:
    out = set()
    for node in nodes:
        for n in gast.walk(node):
            if isinstance(n, gast.Name) and isinstance(n.ctx, (gast.Store, gast.Param)):
                out.add(n.id)
            if isinstance(n, gast.FunctionDef):
                out.add(n.name)
    return out


def _to_ast(node) -> Any:
    return gast.gast_to_ast(node)


def convert_rule(rule) -> ConvertedRule:
    """Closure-convert a registered :class:`~zyg.rules.registry.Rule`."""
    fn = rule.rule_fn
    filename = fn.__code__.co_filename
    lineno = fn.__code__.co_firstlineno

    def bad(msg):
        return UnsupportedSyntax(f"cannot use the custom rule {fn.__qualname__!r}: {msg}",
                                 filename, lineno,
                                 hint="a rule is 'def r(x...): y = f(x...); def back(dy): "
                                      "return (dx...,); return y, back'")
    try:
        src = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError) as e:
        raise bad(f"its source is not available ({e})")
    tree = gast.parse(src)
    fdef = next(n for n in tree.body if isinstance(n, gast.FunctionDef))
    a = fdef.args
    if a.vararg or a.kwarg or a.kwonlyargs:
        raise bad("rules take positional parameters only")
    params = [p.id for p in a.posonlyargs + a.args]
    body = list(fdef.body)
    if body and isinstance(body[0], gast.Expr) and isinstance(body[0].value, gast.Constant):
        body = body[1:]
    if not body or not isinstance(body[-1], gast.Return) or not isinstance(body[-1].value, gast.Tuple) \
            or len(body[-1].value.elts) != 2:
        raise bad("it must end with 'return y, back'")
    ret = body[-1].value
    backs = [n for n in body[:-1] if isinstance(n, gast.FunctionDef)]
    if len(backs) != 1 or not isinstance(ret.elts[1], gast.Name) or ret.elts[1].id != backs[0].name:
        raise bad("it must define exactly one pullback function and return it")
    back = backs[0]
    bparams = back.args.posonlyargs + back.args.args
    if len(bparams) != 1:
        raise bad("the pullback must take exactly one argument (the output cotangent)")
    dy = bparams[0].id
    forward = [n for n in body[:-1] if n is not back]
    for n in forward:
        for sub in gast.walk(n):
            if isinstance(sub, (gast.Return, gast.Yield, gast.FunctionDef)):
                raise bad("the forward part must be straight code without return")

    fwd_locals = _names_stored(forward)
    back_locals = _names_stored(back.body) | {dy}
    free = sorted((_names_loaded(back) - back_locals) & (set(params) | fwd_locals))

    glob = dict(fn.__globals__)
    if fn.__closure__:
        for nm, cell in zip(fn.__code__.co_freevars, fn.__closure__):
            try:
                glob[nm] = cell.cell_contents
            except ValueError:
                pass

    # forward: the simple case is 'y = expr' (or 'return expr, back')
    out = None
    fwd_expr = None
    y_node = ret.elts[0]
    if not forward:
        fwd_expr = y_node
    elif (len(forward) == 1 and isinstance(forward[0], gast.Assign) and len(forward[0].targets) == 1
          and isinstance(forward[0].targets[0], gast.Name) and isinstance(y_node, gast.Name)
          and y_node.id == forward[0].targets[0].id):
        out = y_node.id
        fwd_expr = forward[0].value
    # backward: the simple case is a single 'return (e1, ..., en)'
    bbody = [n for n in back.body if not (isinstance(n, gast.Expr) and isinstance(n.value, gast.Constant))]
    final = bbody[-1] if bbody else None
    if not isinstance(final, gast.Return) or final.value is None:
        raise bad("the pullback must end with 'return (dx1, ..., dxn)'")
    n_returns = sum(isinstance(s, gast.Return) for n in bbody for s in gast.walk(n))
    entries = final.value.elts if isinstance(final.value, gast.Tuple) else None
    if entries is not None and len(entries) != len(params):
        raise bad(f"the pullback returns {len(entries)} gradients for {len(params)} arguments")
    if entries is not None and n_returns == 1:
        nonzero = [not (isinstance(e, gast.Constant) and e.value is None) for e in entries]
    else:
        nonzero = [True] * len(params)
    back_exprs = None
    if len(bbody) == 1 and entries is not None:
        back_exprs = [_to_ast(e) if nz else None for e, nz in zip(entries, nonzero)]

    conv = ConvertedRule(
        name=fn.__name__ if fn.__name__ not in ("_", "<lambda>") else "rule",
        params=params, out=out,
        fwd_expr=_to_ast(fwd_expr) if fwd_expr is not None else None,
        back_param=dy, back_exprs=back_exprs, free=free, nonzero=nonzero,
        globals=glob, filename=filename, lineno=lineno)
    if fwd_expr is None:
        conv.extra_res = [v for v in free if v not in params]
        y_src = ast.unparse(_to_ast(y_node))
        fwd_body = "\n".join(ast.unparse(_to_ast(s)) for s in forward)
        rets = ", ".join([y_src] + conv.extra_res)
        conv.fwd_src = (f"def {conv.name}_fwd({', '.join(params)}):\n"
                        + textwrap.indent(fwd_body, "    ") + f"\n    return ({rets},)\n")
    if back_exprs is None:
        bargs = params + conv.extra_res + ([out] if out and out not in conv.extra_res else []) + [dy]
        conv.bwd_src = (f"def {conv.name}_bwd({', '.join(bargs)}):\n"
                        + textwrap.indent("\n".join(ast.unparse(_to_ast(s)) for s in back.body), "    ")
                        + "\n")
    return conv


def passes_cotangent(expr: Optional[ast.expr], dy: str) -> bool:
    """Is the backward expression ``dy`` or ``-dy`` (a contribution that is zero, never
    nan, when the cotangent is zero)?"""
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, (ast.USub, ast.UAdd)):
        expr = expr.operand
    return isinstance(expr, ast.Name) and expr.id == dy


class _Renamer(ast.NodeTransformer):
    def __init__(self, mapping: Dict[str, str], globals_used: Set[str]):
        self.mapping = mapping
        self.globals_used = globals_used

    def visit_Name(self, node):
        if node.id in self.mapping:
            return ast.copy_location(ast.parse(self.mapping[node.id], mode="eval").body, node)
        self.globals_used.add(node.id)
        return node


def render(expr: ast.expr, mapping: Dict[str, str], globals_used: Set[str]) -> str:
    """Source text of a rule expression with its local names replaced."""
    import copy
    new = _Renamer(mapping, globals_used).visit(copy.deepcopy(expr))
    return ast.unparse(new)


def resolve_global(conv: ConvertedRule, name: str) -> Any:
    if name in conv.globals:
        return conv.globals[name]
    if hasattr(builtins, name):
        return getattr(builtins, name)
    raise UnsupportedSyntax(f"name {name!r} used by the rule {conv.name!r} is not defined",
                            conv.filename, conv.lineno)
