"""Non-blocking communication in reverse mode: which wait completes which start, and whether
the reverse messages will be matched as the primal's were (``zyg/tasks/mpi.py``).

A communicating primitive's rule (``CommRule``) may declare ``link``: ``("start", d)`` for
the start of a non-blocking message (``d``: ``"s"`` a send, ``"r"`` a receive), whose result
is a request handle, or ``("wait", d, k)`` for its completion, whose operand ``k`` is that
handle.  The reverse is issued at the wait ("reversed at their wait") and completed at the
start: the adjoint of the wait starts the reverse message and keeps its handle in a variable
of the adjoint, ``_zr<id of the start's result>``, which the adjoint of the start completes.
Blocking primitives declare ``dirs``: the directions they complete on the spot.

:func:`check_links` refuses, at the user's line, what this cannot reverse soundly:

* a wait whose handle is not the result of one start (a handle chosen at a branch join,
  carried by a loop, stored), a start waited twice or never, a handle used otherwise;
* a start not completed in the same iteration of the same loops on every path that leaves
  it (a ``break``, ``return`` or ``continue`` between them, a wait in a branch);
* messages of one direction completed out of their start order: MPI matches the messages
  of a pair of ranks with one tag in the order they are posted, and the reverse posts its
  messages in the reverse order of the primal's completions, so completions out of order
  (an ``isend`` waited after a later ``isend``, or after a blocking ``send``, of the same
  rank) could pair the reverse messages differently from the primal's.  The waits of a
  ``waitall`` are emitted in the start order by the front end.
* a call between a start and its wait whose communication zyg cannot see (a recursive
  call, a checkpoint, a checkpointed loop, a gradient inside, a hook).
"""
from __future__ import annotations

from typing import Any, Dict, List, Set, Tuple

from ..errors import UnsupportedSyntax
from ..rules.higher import Checkpointed, Hooked
from ..ssa.ir import Branch, Return, Var
from ..ssa.prims import Recursive

_WHAT = {"s": "isend", "r": "irecv"}


def link_name(v: Var) -> str:
    """The adjoint's variable for the reverse of the request ``v`` (a start's result)."""
    return f"_zr{v.id}"


def rule_of(st) -> Any:
    return getattr(st.expr.fn, "_zyg_comm", None)


def _opaque(fn) -> bool:
    return isinstance(fn, (Recursive, Checkpointed, Hooked)) or hasattr(fn, "array_rule") or \
        hasattr(fn, "tangent_src")


def _ends_path(fn) -> bool:
    """A raiser of the front end (``zyg/ssa/raising.py``) that always raises."""
    return bool(getattr(fn, "_zyg_raises", False))


def check_links(em) -> None:
    """Check the non-blocking messages of the emitter's function (see the module's docstring);
    raise ``UnsupportedSyntax`` at the user's line."""
    fn = em.fn
    where: Dict[int, Tuple[int, int]] = {}          # id(stmt) -> (block, index)
    starts: Dict[int, Any] = {}                     # handle var id -> start stmt
    waits: Dict[int, List[Any]] = {}                # handle var id -> wait stmts
    uses: Dict[int, List[Any]] = {}                 # var id -> stmts (None: a terminator) using it
    for blk in fn.iter_blocks():
        for i, st in enumerate(blk.stmts):
            where[id(st)] = (blk.id, i)
            for a in st.expr.operands():
                if isinstance(a, Var):
                    uses.setdefault(a.id, []).append(st)
            rule = rule_of(st)
            link = getattr(rule, "link", None)
            if link is None:
                continue
            if link[0] == "start":
                if st.var is None:
                    raise em.err(st, "the request of this non-blocking call is dropped", cls=UnsupportedSyntax)
                starts[st.var.id] = st
            else:
                h = st.expr.args[link[2]]
                waits.setdefault(h.id if isinstance(h, Var) else -1, []).append(st)
        for _, args in blk.term.successors():
            for a in args:
                if isinstance(a, Var):
                    uses.setdefault(a.id, []).append(None)
        if isinstance(blk.term, Return) and isinstance(blk.term.value, Var):
            uses.setdefault(blk.term.value.id, []).append(None)
        if isinstance(blk.term, Branch) and isinstance(blk.term.cond, Var):
            uses.setdefault(blk.term.cond.id, []).append(None)
    hint = ("start and wait each request in one block of code, in the same loop iteration: "
            "status, req = mpi.irecv(buf, source, tag) ... mpi.wait(req), or mpi.waitall((r1, r2))")
    for hid, ws in waits.items():
        if hid not in starts:
            raise em.err(ws[0], "zyg cannot tell which isend or irecv started the request this call "
                                "waits for", hint=hint, cls=UnsupportedSyntax)
    for hid, st in starts.items():
        d = rule_of(st).link[1]
        ws = waits.get(hid, [])
        if not ws:
            raise em.err(st, f"this {_WHAT[d]}() is never waited for (wait or waitall) in the "
                             "differentiated function", hint=hint, cls=UnsupportedSyntax)
        if len(ws) > 1:
            raise em.err(ws[1], "this request is waited for twice", hint=hint, cls=UnsupportedSyntax)
        w = ws[0]
        if rule_of(w).link[1] != d:
            raise em.err(w, "this wait does not match its request's kind", cls=UnsupportedSyntax)
        other = [u for u in uses.get(hid, []) if u is not w]
        if other:
            u = other[0]
            raise em.err(u if u is not None else w,
                         "a request of a non-blocking call may only be waited for (it is passed "
                         "along a branch, a loop or another call here)", hint=hint, cls=UnsupportedSyntax)
    for hid, st in starts.items():
        _check_between(em, st, waits[hid][0], where, starts, waits, hint)


def _check_between(em, s, w, where, starts, waits, hint) -> None:
    """Every path from the start ``s`` reaches its wait ``w`` within the iteration, and no
    message of the same direction completes between them out of order."""
    fn = em.fn
    p = em.p
    d = rule_of(s).link[1]
    sb, si = where[id(s)]
    wb, wi = where[id(w)]
    if p.loops_of.get(sb, set()) != p.loops_of.get(wb, set()):
        raise em.err(w, f"this wait is in another loop than its {_WHAT[d]}() (line "
                        f"{s.loc.lineno if s.loc else '?'}): zyg reverses a request started and waited "
                        "for in the same iteration", hint=hint, cls=UnsupportedSyntax)
    # the innermost loop of the start: its header ends the iteration
    inner = None
    for h in p.loops_of.get(sb, set()):
        if inner is None or len(p.loops[h]) < len(p.loops[inner]):
            inner = h
    body = p.loops[inner] if inner is not None else None
    started_between: Set[int] = set()
    seen: Set[int] = set()
    work: List[Tuple[int, int]] = [(sb, si + 1)]
    while work:
        b, i = work.pop()
        blk = fn.blocks[b]
        stopped = False
        for st in blk.stmts[i:]:
            if st is w:
                stopped = True
                break
            if _ends_path(st.expr.fn):
                stopped = True
                break
            if _opaque(st.expr.fn):
                raise em.err(st, f"this call runs between an {_WHAT[d]}() and its wait (line "
                                 f"{w.loc.lineno if w.loc else '?'}), and zyg cannot see whether it "
                                 "communicates", hint="wait for the request before the call",
                             cls=UnsupportedSyntax)
            rule = rule_of(st)
            if rule is None:
                continue
            link = getattr(rule, "link", None)
            if link is None:
                if d in getattr(rule, "dirs", ()):
                    raise em.err(st, _order_msg(d, s, "this blocking call"), hint=_order_hint(d),
                                 cls=UnsupportedSyntax)
            elif link[1] == d and link[0] == "start":
                started_between.add(st.var.id)
            elif link[1] == d and link[0] == "wait" and st.expr.args[link[2]].id in started_between:
                raise em.err(st, _order_msg(d, s, "this wait of a later one"), hint=_order_hint(d),
                             cls=UnsupportedSyntax)
        if stopped:
            continue
        if isinstance(blk.term, Return):
            raise em.err(s, f"a path from this {_WHAT[d]}() returns before its wait (line "
                            f"{w.loc.lineno if w.loc else '?'})", hint=hint, cls=UnsupportedSyntax)
        for t, _ in blk.term.successors():
            if body is not None and (t == inner or t not in body):
                raise em.err(s, f"a path from this {_WHAT[d]}() leaves the loop iteration before its "
                                f"wait (line {w.loc.lineno if w.loc else '?'})", hint=hint,
                             cls=UnsupportedSyntax)
            if t not in seen:
                seen.add(t)
                work.append((t, 0))


def _order_msg(d: str, s, what: str) -> str:
    kind = "send" if d == "s" else "receive"
    return (f"{what} completes a {kind} while the {_WHAT[d]}() of line "
            f"{s.loc.lineno if s.loc else '?'} is still pending: zyg reverses the {kind}s of a rank "
            "only when they complete in the order they were started (MPI matches the reverse "
            "messages in the order they are posted)")


def _order_hint(d: str) -> str:
    return "wait for the earlier request first (waitall waits in start order)"
