"""Pickling zyg's gradient objects, so that ``multiprocessing``, ``concurrent.futures``,
Dask or Ray can send them to other processes (docs/tasks.md).

What ``zyg.grad(f)`` (``value_and_grad``, ``jacobian``, ``hessian``) returns is a
:class:`zyg.driver.ZygFunction`; its ``__reduce__`` comes here.  The pickle holds how to
make the object again, ``(maker, f, options)``, never compiled code: the other process
calls ``zyg.<maker>(f, **options)`` on its first use, which transforms ``f`` again, or
loads the compiled code from zyg's and numba's disk cache where that process shares it.

``f`` itself is pickled

* **by reference** where it is importable: a module-level function (or ``@numba.njit``
  dispatcher) of a module with an import spec, which ``getattr(module, qualname)`` finds
  again: the pickle holds the module and qualified names;
* **by value** otherwise (``__main__``, a notebook, ``python -c``, a closure, a lambda, a
  function made by ``exec``): its source text (without decorators), its closure cells'
  values, the globals its code loads (numbers, arrays, any picklable value; modules by
  name; functions by the same two rules, recursively, cycles included), its defaults.  On
  load the source is compiled under a file name registered with ``linecache`` (zyg reads
  sources with ``inspect.getsource``) and the function is rebuilt from the compiled code
  with new cells: its ``def`` line and decorators never run.

Values are captured when ``pickle.dumps`` runs: a closure over an array that the sender
changes afterwards still holds the old values on the other side.

``functools.partial`` objects, bound methods and nested zyg transforms
(``zyg.grad(zyg.grad(f))``) are taken apart the same way.  ``zyg.pullback``'s ``back``
holds the tape of one call and does not pickle (``zyg.driver.Back``).
"""
from __future__ import annotations

import ast
import builtins
import dis
import functools
import hashlib
import importlib
import inspect
import linecache
import pickle
import sys
import textwrap
import types
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from .. import api, driver
from ..errors import NotPicklable

#: format of the pickled description (checked on load)
FORMAT = 1

_MAKERS = ("grad", "value_and_grad", "jacobian", "hessian")
_ATOMS = (bool, int, float, complex, str, bytes, type(None), np.generic, np.dtype)
_GLOBAL_OPS = {"LOAD_GLOBAL", "LOAD_NAME", "STORE_GLOBAL", "DELETE_GLOBAL"}


# -- the reducer ---------------------------------------------------------------------------

def reduce_transform(obj: Any, recipe: tuple) -> tuple:
    """``obj.__reduce__()`` of a :class:`~zyg.driver.ZygFunction`."""
    maker, f, opts = recipe
    if maker not in _MAKERS:
        raise NotPicklable(f"{obj!r} cannot be pickled ({maker})")
    cap = _Capture()
    root = cap.token(f, f"the function given to zyg.{maker}")
    payload = (maker, cap.bundle(), root, dict(opts))
    # what the receiver memoises by: pool.map pickles the function with every chunk of
    # tasks, and each one must not transform and compile it again
    digest = hashlib.sha256(pickle.dumps(payload, protocol=4)).hexdigest()
    return (_remake, (FORMAT, digest) + payload)


#: digest -> the object rebuilt from it in this process
_MEMO: Dict[str, Any] = {}
_MEMO_MAX = 256


def _remake(fmt: int, digest: str, maker: str, bundle: dict, root: Any, opts: dict) -> Any:
    """Unpickling: rebuild the function and apply ``zyg.<maker>`` to it again (once per
    process for the same pickled content)."""
    if fmt != FORMAT:
        raise NotPicklable(f"this zyg gradient was pickled in format {fmt}; this version of "
                           f"zyg reads format {FORMAT}",
                           hint="use the same zyg version in every process")
    got = _MEMO.get(digest)
    if got is not None:
        return got
    f = _Rebuild(bundle).value(root)
    out = getattr(api, maker)(f, **opts)
    if len(_MEMO) >= _MEMO_MAX:
        _MEMO.clear()
    return _MEMO.setdefault(digest, out)


def install() -> None:
    if reduce_transform not in driver.REDUCERS:
        driver.REDUCERS[:] = [reduce_transform]


# -- capture (the sending side) ------------------------------------------------------------

def importable(obj: Any) -> Optional[Tuple[str, str]]:
    """``(module, qualname)`` when ``obj`` is found again by importing its module and
    following its qualified name (the same object), else None."""
    mod = getattr(obj, "__module__", None)
    qn = getattr(obj, "__qualname__", None)
    if not isinstance(mod, str) or not isinstance(qn, str) or "<" in qn or \
            mod in ("__main__", "__mp_main__"):
        return None
    m = sys.modules.get(mod)
    if m is None or getattr(m, "__spec__", None) is None:
        return None             # a module made by hand (a notebook's, a test's): not importable
    o: Any = m
    for part in qn.split("."):
        o = getattr(o, part, None)
        if o is None:
            return None
    return (mod, qn) if o is obj else None


def global_names(code: types.CodeType) -> List[str]:
    """The global names ``code`` (and the code nested in it) loads, stores or deletes."""
    out: List[str] = []
    stack = [code]
    while stack:
        co = stack.pop()
        for ins in dis.get_instructions(co):
            if ins.opname in _GLOBAL_OPS and isinstance(ins.argval, str) and ins.argval not in out:
                out.append(ins.argval)
        stack.extend(c for c in co.co_consts if isinstance(c, types.CodeType))
    return out


class _Capture:
    """Walks a function and what it refers to into picklable data: a list of function
    records and a list of global namespaces, which tokens refer to by index."""

    def __init__(self):
        self.functions: List[dict] = []
        self.globals: List[dict] = []
        self._fn_index: Dict[int, int] = {}
        self._glob_index: Dict[int, int] = {}
        self._keep: List[Any] = []          # objects whose id() is a key above

    def bundle(self) -> dict:
        return {"functions": self.functions, "globals": self.globals}

    def token(self, v: Any, what: str) -> tuple:
        if isinstance(v, _ATOMS) or isinstance(v, np.ndarray) and v.dtype.kind != "O":
            return ("val", v)
        if isinstance(v, driver.ZygFunction):
            recipe = v.__dict__.get("_zyg_recipe")
            if recipe is None:
                raise NotPicklable(f"{what} is {v!r}, which cannot be pickled")
            maker, f, opts = recipe
            return ("zyg", maker, self.token(f, what), dict(opts))
        if isinstance(v, types.ModuleType):
            if getattr(v, "__spec__", None) is None or v.__name__ in ("__main__", "__mp_main__"):
                raise NotPicklable(f"{what} is the module {v.__name__!r}, which another process "
                                   "cannot import")
            return ("mod", v.__name__)
        ref = importable(v) if callable(v) else None
        if ref is not None:
            return ("ref",) + ref
        if isinstance(v, types.FunctionType):
            return ("fn", self.function(v))
        if hasattr(v, "py_func") and hasattr(v, "targetoptions"):     # a numba dispatcher
            opts = {k: o for k, o in dict(v.targetoptions).items() if k != "nopython"}
            return ("njit", self.token(v.py_func, what), opts)
        if isinstance(v, functools.partial):
            return ("partial", self.token(v.func, what),
                    [self.token(a, f"{what} (a bound argument)") for a in v.args],
                    {k: self.token(a, f"{what} (a bound keyword)") for k, a in v.keywords.items()})
        if isinstance(v, types.MethodType):
            return ("method", self.token(v.__self__, f"the object of {what}"),
                    self.token(v.__func__, what))
        if type(v) in (tuple, list):
            return (type(v).__name__, [self.token(a, what) for a in v])
        if type(v) is dict:
            return ("dict", [(self.token(k, what), self.token(a, what)) for k, a in v.items()])
        cls = v if isinstance(v, type) else type(v)
        if importable(cls) is None:
            raise NotPicklable(f"{what} is {_short(v)}, {'a class' if cls is v else 'of a class'} "
                               f"defined in {cls.__module__!r}, which another process cannot "
                               "import", hint="define the class in an importable module, or "
                                              "pass the value as an argument")
        # anything else: pickle's own rules (a class by reference, an object by its
        # __reduce__); tried here so that the error names what zyg was capturing
        try:
            pickle.dumps(v, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as e:
            raise NotPicklable(f"{what} is {_short(v)}, which cannot be pickled: {e}",
                               hint="pass it as an argument, or define it in an importable "
                                    "module") from None
        return ("val", v)

    def function(self, fn: types.FunctionType) -> int:
        i = self._fn_index.get(id(fn))
        if i is not None:
            return i
        i = len(self.functions)
        self._fn_index[id(fn)] = i
        self._keep.append(fn)
        rec: dict = {}
        self.functions.append(rec)          # before its references: recursion, cycles
        code = fn.__code__
        name = fn.__name__
        text, kind = _source_text(fn)
        rec.update(name=name, qualname=fn.__qualname__, module=fn.__module__, text=text,
                   kind=kind, freevars=list(code.co_freevars),
                   filename=code.co_filename, firstlineno=code.co_firstlineno)
        gi = self._namespace(fn.__globals__)
        rec["globals"] = gi
        ns = self.globals[gi]["values"]
        where = f"{fn.__qualname__} ({code.co_filename}:{code.co_firstlineno})"
        for n in global_names(code):
            if n in fn.__globals__ and n not in ns:
                ns[n] = None                     # (claimed: a cycle sees it)
                ns[n] = self.token(fn.__globals__[n], f"the global {n!r} that {where} reads")
        cells = []
        for n, c in zip(code.co_freevars, fn.__closure__ or ()):
            try:
                v = c.cell_contents
            except ValueError:
                cells.append(("empty",))
                continue
            cells.append(self.token(v, f"the variable {n!r} that {where} captures"))
        rec["cells"] = cells
        rec["defaults"] = None if fn.__defaults__ is None else \
            [self.token(d, f"a default of {where}") for d in fn.__defaults__]
        rec["kwdefaults"] = None if not fn.__kwdefaults__ else \
            {k: self.token(d, f"the default of {k!r} of {where}") for k, d in fn.__kwdefaults__.items()}
        return i

    def _namespace(self, glob: dict) -> int:
        gi = self._glob_index.get(id(glob))
        if gi is None:
            gi = self._glob_index[id(glob)] = len(self.globals)
            self._keep.append(glob)
            self.globals.append({"name": glob.get("__name__", "__zyg_pickled__"), "values": {}})
        return gi


def _short(v: Any) -> str:
    r = repr(v)
    return r if len(r) <= 80 else r[:77] + "..."


def _source_text(fn: types.FunctionType) -> Tuple[str, str]:
    """The text to compile on the other side and its kind: ``"def"`` (a ``def`` without
    decorators, compiled alone), ``"closure"`` (the ``def`` inside a function whose
    parameters are its free variables) or ``"lambda"`` (``_zyg_fn = (<the lambda>)``,
    inside such a function)."""
    code = fn.__code__
    where = f"{fn.__qualname__} ({code.co_filename}:{code.co_firstlineno})"
    try:
        lines, _ = inspect.getsourcelines(fn)
    except (OSError, TypeError) as e:
        raise NotPicklable(
            f"cannot pickle {where} by value: its source is not available ({e})",
            hint="define it in a file, a notebook cell or an importable module") from None
    src = textwrap.dedent("".join(lines))
    if fn.__name__ == "<lambda>":
        seg = _lambda_segment(src, fn, where)
        params = ", ".join(code.co_freevars)
        body = textwrap.indent(f"_zyg_fn = ({seg})\nreturn _zyg_fn\n", "    ")
        return f"def _zyg_make({params}):\n{body}", "lambda"
    try:
        tree = ast.parse(src)
    except SyntaxError:
        tree = None
    node = None
    if tree is not None:
        for nd in ast.walk(tree):
            if isinstance(nd, ast.FunctionDef) and nd.name == fn.__name__:
                node = nd
                break
    if node is None:
        raise NotPicklable(f"cannot pickle {where} by value: its definition was not found in "
                           "its source")
    src_lines = src.splitlines(True)
    text = textwrap.dedent("".join(src_lines[node.lineno - 1:node.end_lineno]))
    if not code.co_freevars:
        return text, "def"
    params = ", ".join(code.co_freevars)
    body = textwrap.indent(text + f"return {fn.__name__}\n", "    ")
    return f"def _zyg_make({params}):\n{body}", "closure"


def _lambda_segment(src: str, fn: types.FunctionType, where: str) -> str:
    """The text of the lambda ``fn`` in the lines ``src`` that hold it."""
    argnames = list(fn.__code__.co_varnames[:fn.__code__.co_argcount])
    for cand in (src, "(" + src.strip().rstrip(",") + ")", src.strip().split("=", 1)[-1]):
        try:
            tree = ast.parse(textwrap.dedent(cand))
        except SyntaxError:
            continue
        text = textwrap.dedent(cand)
        found = [nd for nd in ast.walk(tree) if isinstance(nd, ast.Lambda)
                 and [a.arg for a in nd.args.args] == argnames]
        if len(found) == 1:
            return ast.get_source_segment(text, found[0])
        if len(found) > 1:
            raise NotPicklable(f"cannot pickle {where} by value: several lambdas with these "
                               "arguments on its line", hint="give the function a name with 'def'")
    raise NotPicklable(f"cannot pickle {where} by value: its source could not be parsed")


# -- rebuild (the receiving side) ----------------------------------------------------------

def _find_code(code: types.CodeType, name: str) -> Optional[types.CodeType]:
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            if c.co_name == name:
                return c
            got = _find_code(c, name)
            if got is not None:
                return got
    return None


class _Rebuild:
    def __init__(self, bundle: dict):
        self.globals: List[dict] = []
        for g in bundle["globals"]:
            self.globals.append({"__name__": g["name"], "__builtins__": builtins})
        self.functions: List[types.FunctionType] = [self._make(r) for r in bundle["functions"]]
        # second pass: values may refer to any function (recursion, cycles)
        for g, ns in zip(bundle["globals"], self.globals):
            for n, tok in g["values"].items():
                ns[n] = self.value(tok)
        for r, fn in zip(bundle["functions"], self.functions):
            cells = dict(zip(fn.__code__.co_freevars, fn.__closure__ or ()))
            for n, tok in zip(r["freevars"], r["cells"]):
                if tok[0] != "empty":
                    cells[n].cell_contents = self.value(tok)
            if r["defaults"] is not None:
                fn.__defaults__ = tuple(self.value(t) for t in r["defaults"])
            if r["kwdefaults"]:
                fn.__kwdefaults__ = {k: self.value(t) for k, t in r["kwdefaults"].items()}

    def _make(self, r: dict) -> types.FunctionType:
        text = r["text"]
        h = hashlib.sha256(text.encode()).hexdigest()[:12]
        filename = f"<zyg pickled {r['qualname']} from {r['filename']}:{r['firstlineno']} {h}>"
        # zyg parses functions with inspect.getsource, which reads linecache
        linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
        top = compile(text, filename, "exec", dont_inherit=True)
        name = "<lambda>" if r["kind"] == "lambda" else r["name"]
        if r["kind"] == "def":
            code = _find_code(top, name)
        else:
            maker = _find_code(top, "_zyg_make")
            code = _find_code(maker, name) if maker is not None else None
        if code is None:
            raise NotPicklable(f"cannot rebuild {r['qualname']}: its code was not found in its "
                               "pickled source")
        cells = tuple(types.CellType() for _ in code.co_freevars)
        fn = types.FunctionType(code, self.globals[r["globals"]], r["name"], None, cells or None)
        fn.__qualname__ = r["qualname"]
        return fn

    def value(self, tok: tuple) -> Any:
        k = tok[0]
        if k == "val":
            return tok[1]
        if k == "fn":
            return self.functions[tok[1]]
        if k == "ref":
            o: Any = importlib.import_module(tok[1])
            for part in tok[2].split("."):
                o = getattr(o, part)
            return o
        if k == "mod":
            return importlib.import_module(tok[1])
        if k == "njit":
            import numba
            return numba.njit(**tok[2])(self.value(tok[1]))
        if k == "partial":
            return functools.partial(self.value(tok[1]), *[self.value(t) for t in tok[2]],
                                     **{n: self.value(t) for n, t in tok[3].items()})
        if k == "method":
            return types.MethodType(self.value(tok[2]), self.value(tok[1]))
        if k == "tuple":
            return tuple(self.value(t) for t in tok[1])
        if k == "list":
            return [self.value(t) for t in tok[1]]
        if k == "dict":
            return {self.value(a): self.value(b) for a, b in tok[1]}
        if k == "zyg":
            return getattr(api, tok[1])(self.value(tok[2]), **tok[3])
        raise NotPicklable(f"unknown item {k!r} in a pickled zyg gradient")
