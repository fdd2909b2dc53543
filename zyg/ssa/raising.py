"""``raise`` and ``assert`` in differentiated code: checks, never differentiated.

``raise E(args)`` and ``assert test, msg`` are lowered to a call of a small generated
*raiser*: a plain Python function whose body is the user's ``raise`` (``assert``: an
``if not test: raise AssertionError(msg)``), with every run-time value in it (number
arguments, the values an f-string formats) passed as a parameter and every constant
(strings, numbers) written into its source.  The raiser is declared
non-differentiable, so it runs in the primal only; numba compiles it like any other
called function on the ``cpu`` target, and the exception the caller sees has the
type and arguments the plain Python function would raise.  After a ``raise`` the path
goes to the function's exit without a result (the value there is undefined and never
read, since the raiser never returns).
"""
from __future__ import annotations

import ast
import itertools
from typing import Any, Dict, List, Tuple

import gast

from . import hooks
from .ir import Operand

_RAISERS: Dict[Tuple[Any, str], Any] = {}
_COUNT = itertools.count()


def _none_kind(kinds) -> str:
    return "none"


def _raiser(exc: Any, msg: str, nparams: int, check: bool, formats: bool, name: str,
            action: str = "raise _exc({})") -> Any:
    """A non-differentiable function ``name([ok,] a0, a1, ...)`` that raises ``exc(msg)``
    (when ``check``: only if ``ok`` is false).  A message that formats values (which
    numba's nopython mode cannot do) is raised from a plain Python function called in
    numba's object mode.  Cached by exception class and source, so that a function
    lowered again reuses it."""
    params = [f"a{k}" for k in range(nparams)]
    # run-time values in the exception: raised by Python (numba's own exceptions with
    # run-time arguments do not survive its disk cache)
    formats = formats or nparams > 0
    head = ["ok"] if check else []
    ind = "        " if check else "    "
    if formats:
        raise_src = f"{ind}with _objmode():\n{ind}    _format_and_raise({', '.join(params)})\n"
    else:
        raise_src = f"{ind}{action.format(msg)}\n"
    src = f"def {name}({', '.join(head + params)}):\n" + \
        ("    if not ok:\n" if check else "") + raise_src
    key = (exc, msg, nparams, check, formats, action)
    fn = _RAISERS.get(key)
    if fn is None:
        import numba
        ns: Dict[str, Any] = {"_exc": exc, "_objmode": numba.objmode}
        exec(compile(f"def _format_and_raise({', '.join(params)}):\n    {action.format(msg)}\n" + src,
                     f"<zyg {name}>", "exec"), ns)
        fn = ns[name]
        fn.__qualname__ = name
        # its result is None: kind inference must not run it on sample values
        fn._zyg_kind = _none_kind
        # numba's disk cache keeps no environment for object mode: callers compile afresh
        fn._zyg_uncacheable = formats
        # the path ends here (pullbacks/comm.py: a request need not be waited for after it)
        fn._zyg_raises = not check
        # an effect besides raising (zyg/tiered.py runs only code without one twice)
        fn._zyg_prints = action.startswith("print")
        hooks.generated_nondifferentiable(fn)
        _RAISERS[key] = fn
    return fn


def _has_text(node) -> bool:
    return any(isinstance(n, gast.Constant) and isinstance(n.value, (str, bytes))
               or isinstance(n, gast.JoinedStr) for n in gast.walk(node))


class _Params:
    """The run-time values of a message: every largest part of an argument that holds no
    text (a number, an array, an expression of them) becomes a parameter ``a<k>``; text
    and what formats it (f-strings, ``%``, ``str(...)``, ``.format``) stay in the source."""

    def __init__(self, low):
        self.low = low
        self.values: List[Any] = []       # the gast nodes, in order
        self.formats = False              # does the message format values (Python only)

    def param(self) -> Any:
        return gast.Name(id=f"a{len(self.values) - 1}", ctx=gast.Load(), annotation=None,
                         type_comment=None)

    def rewrite(self, node) -> Any:
        if isinstance(node, gast.Constant):
            return node
        if isinstance(node, gast.Name):
            where, fr = self.low.resolve(node.id)
            if where == "var" and node.id in fr.texts:
                # msg = "..."; raise ValueError(msg): the text written in
                text = fr.texts[node.id]
                if text is None:
                    raise self.low.unsupported(node, f"the message {node.id!r} is assigned "
                                                     "different strings",
                                               "raise each message where it is chosen")
                return gast.Constant(value=text, kind=None)
        if isinstance(node, gast.FormattedValue):
            node.value = self.rewrite(node.value)
            self.formats = True
            return node
        if not _has_text(node) and not (isinstance(node, gast.Name) and node.id in _FORMATTERS):
            self.values.append(node)
            return self.param()
        self.formats = True
        if isinstance(node, gast.Call):
            node.args = [self.rewrite(a) for a in node.args]
            for k in node.keywords:
                k.value = self.rewrite(k.value)
            if isinstance(node.func, gast.Attribute):
                node.func.value = self.rewrite(node.func.value)
            return node
        for field, value in gast.iter_fields(node):
            if isinstance(value, gast.expr):
                setattr(node, field, self.rewrite(value))
            elif isinstance(value, list):
                setattr(node, field, [self.rewrite(v) if isinstance(v, gast.expr) else v
                                      for v in value])
        return node


# builtins a message may call to format values
_FORMATTERS = {"str", "repr", "format", "round", "int", "float", "abs", "len"}


def _arg_source(low, node, params: _Params) -> str:
    """Python source of one exception argument, its run-time parts made parameters."""
    import copy
    out = params.rewrite(copy.deepcopy(node))
    return ast.unparse(gast.gast_to_ast(out))


def _exception(low, node) -> Tuple[Any, list]:
    """The exception class and argument nodes of ``raise <node>``."""
    if isinstance(node, gast.Call):
        cls = low.static_value(node.func)
        args = list(node.args)
        if node.keywords or any(isinstance(a, gast.Starred) for a in args):
            raise low.unsupported(node, "keyword or '*' arguments of a raised exception are not "
                                        "supported", "pass the message positionally")
    else:
        cls, args = low.static_value(node), []
    if not (isinstance(cls, type) and issubclass(cls, BaseException)):
        raise low.unsupported(node, "'raise' in differentiated code takes an exception class or a "
                                    "call of one: raise ValueError(\"...\")",
                              "create the exception in the raise statement itself")
    return cls, args


def _message(low, args, params: _Params) -> str:
    return ", ".join(_arg_source(low, a, params) for a in args)


def _name(low, node, what: str) -> str:
    loc = low.src.loc(node)
    return f"zyg_{what}_line{loc.lineno}_{next(_COUNT)}"


def _call(low, fn, params: _Params, node, extra: list) -> None:
    args = extra + [low.expr(v) for v in params.values]
    low.emit(fn, args, node, "")


def lower_raise(low, st) -> None:
    """``raise E(...)``: a call of the raiser, then the path ends (goes to the exit)."""
    if st.exc is None:
        raise low.unsupported(st, "a bare 'raise' (re-raising) is not supported in differentiated "
                                  "code", "raise a new exception: raise ValueError(\"...\")")
    if st.cause is not None:
        raise low.unsupported(st, "'raise ... from ...' is not supported in differentiated code",
                              "raise the exception without 'from'")
    cls, args = _exception(low, st.exc)
    params = _Params(low)
    msg = _message(low, args, params)
    fn = _raiser(cls, msg, len(params.values), False, params.formats, _name(low, st, "raise"))
    _call(low, fn, params, st, [])
    # the raiser never returns: the rest of this path is dead (the result stays undefined)
    low.jump(low.exit)


def lower_assert(low, st) -> None:
    """``assert test, msg``: a call of a raiser that checks the test's value."""
    params = _Params(low)
    msg = _message(low, [st.msg], params) if st.msg is not None else ""
    test = low.expr(st.test)
    fn = _raiser(AssertionError, msg, len(params.values), True, params.formats,
                 _name(low, st, "assert"))
    _call(low, fn, params, st, [test])


def lower_print(low, node) -> Operand:
    """``print(...)``: passed through to the primal (a non-differentiable call that the
    adjoint never repeats); values formatted in Python are printed from object mode."""
    for k in node.keywords:
        if k.arg not in ("sep", "end") or not isinstance(k.value, gast.Constant):
            raise low.unsupported(node, "print() in differentiated code takes positional values "
                                        "and constant sep= and end=")
    if any(isinstance(a, gast.Starred) for a in node.args):
        raise low.unsupported(node, "'*' arguments of print() are not supported")
    params = _Params(low)
    msg = _message(low, node.args, params)
    extra = "".join(f", {k.arg}={k.value.value!r}" for k in node.keywords)
    formats = True      # printed by Python (numba cannot print from generated modules)
    fn = _raiser(None, msg + extra, len(params.values), False, formats, _name(low, node, "print"),
                 action="print({})")
    return low.emit(fn, [low.expr(v) for v in params.values], node, "")
