"""``@zyg.adjoint`` rules for functions that take or return arrays.

A user rule whose call has array operands (or an array result) becomes an array
rule (``zyg.rules.arrays.ARule``): the primal calls the function, and the adjoint
calls a generated ``<rule>_vjp(params..., dy)`` that runs the rule's forward part
and its ``back`` on the values the primal saw (the array machinery keeps the operands
as they were: writes are rewound), and returns ``back``'s tuple. Residuals are
recomputed instead of taped, so a rule's forward part runs once more in the adjoint.

Before returning, the vjp checks that each gradient has its argument's shape (a
scalar for a scalar argument) and raises ``zyg.TypeMismatch`` naming the rule, the
argument and, where the back end does not compile, both shapes.
"""
from __future__ import annotations

import ast
import inspect
import textwrap
from typing import Any, List, Optional

from ..errors import TypeMismatch, UnsupportedSyntax
from ..ssa.analysis import array_ndim, is_array


def _vjp_source(rule_fn, name: str, kinds: List[str], nonzero: List[bool], compiled: bool):
    """Source of ``<name>_vjp`` and the rule's file and line (for messages); ``compiled``:
    for a compiling back end (its messages are constant strings)."""
    src = textwrap.dedent(inspect.getsource(rule_fn))
    tree = ast.parse(src)
    fdef = next(n for n in tree.body if isinstance(n, ast.FunctionDef))
    fdef.decorator_list = []
    params = [a.arg for a in fdef.args.posonlyargs + fdef.args.args]
    body = fdef.body[:-1]                     # without 'return y, back'
    back = next(n for n in body if isinstance(n, ast.FunctionDef))
    filename = rule_fn.__code__.co_filename
    lineno = rule_fn.__code__.co_firstlineno + back.lineno - 1
    lines = [f"def {name}_vjp({', '.join(params + ['_zyg_dy'])}):"]
    lines += ["    " + ln for ln in "\n".join(ast.unparse(s) for s in body).split("\n")]
    lines.append(f"    _zyg_r = {back.name}(_zyg_dy)")
    for i, (p, k) in enumerate(zip(params, kinds)):
        if not nonzero[i]:
            continue
        if is_array(k):
            want = f"an array of {array_ndim(k)} dimension(s) shaped like {p}"
        else:
            want = "a number"
        msg = (f"the pullback of the custom rule for {name!r} returned a gradient for "
               f"argument {p!r} that is not {want}")
        if not compiled:
            detail = (f"' (got shape ' + str(np.shape(_zyg_r[{i}])) + ', argument shape ' + "
                      f"str(np.shape({p})) + ')'")
            text = f"{msg!r} + {detail}"
        else:
            text = repr(msg)
        lines.append(f"    if np.shape(_zyg_r[{i}]) != np.shape({p}):")
        lines.append(f"        raise _zyg_TypeMismatch({text}, {filename!r}, {lineno}, None)")
    lines.append("    return _zyg_r")
    return "\n".join(lines) + "\n", params


def user_array_rule(em, st, fn) -> Optional[Any]:
    """The array rule of a registered ``@zyg.adjoint`` rule for ``fn`` (None if none)."""
    from ..rules import registry
    from ..rules.arrays import ARule
    rule = registry.lookup(fn)
    if rule is None or isinstance(fn, type):
        return None
    conv = rule.converted
    args = st.expr.args
    if len(conv.params) != len(args) or st.expr.kwargs:
        raise em.err(st, f"the custom rule for {conv.name!r} takes {len(conv.params)} positional "
                         f"arguments; this call passes {len(args)}"
                     + (" and keywords" if st.expr.kwargs else ""), cls=UnsupportedSyntax)
    kinds = [em.kind(a) for a in args]
    key = ("array_vjp", id(conv), tuple(kinds))
    name = em.helpers_made.get(key)
    if name is None:
        name = em.helpers_made[key] = _make_vjp(em, rule, conv, kinds)

    def back(c, i):
        if not conv.nonzero[i]:
            return None
        return f"{name}({', '.join(c.x)}, {c.dy})[{i}]"
    return ARule(back)


def _make_vjp(em, rule, conv, kinds: List[str]) -> str:
    base = conv.name if conv.name != "rule" else getattr(rule.fn, "__name__", "rule")
    src, _ = _vjp_source(rule.rule_fn, base, kinds, conv.nonzero, em.p.backend.compiled)
    glob = dict(conv.globals)
    glob["_zyg_TypeMismatch"] = TypeMismatch
    glob.setdefault("np", __import__("numpy"))
    fobj = em.p.backend.function(src, f"<zyg rule {base} vjp>", glob, f"{base}_vjp")
    return em.ns.ref(fobj, f"{base}_vjp")
