"""Data types that describe a benchmark workload.

A :class:`Workload` is one function from ``shared/BENCHMARKS.md`` together with
everything the runner needs to measure it: the plain Python function (what zyg
differentiates and numba compiles as the primal), a hand-written numba adjoint
(the practical limit for a gradient), one or more :class:`Case` sizes, a
finite-difference step, an optional closed-form gradient, and the same workload
written in each peer framework's idiom (:class:`PeerImpl`).

The gradient is taken with respect to the arguments listed in
:attr:`Workload.argnums` (default: argument 0); the other arguments (sizes,
integer orders, data) are inactive. With one argnum a gradient is a float or an
array; with several it is a tuple with one entry per argnum, in order.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional

Args = tuple[Any, ...]
"""Positional arguments of a workload function."""

ValueAndGrad = Callable[..., tuple[Any, Any]]
"""A callable ``vg(*args) -> (value, grad)``; ``grad`` is w.r.t. the workload's
``argnums`` (a tuple of gradients when there are several)."""


@dataclasses.dataclass(frozen=True)
class PeerImpl:
    """One peer framework's version of a workload.

    Attributes:
        build: given the case arguments, return a ``vg(*args) -> (value, grad)``
            callable written in the framework's idiom. It is called once per case,
            imports the framework itself (peers are optional) and may close over
            static information (a JAX static trip count, say). The returned callable
            must block until the result is computed (``jax.block_until_ready``).
        note: short note for the report: how the workload is written for this
            framework and what it cannot express.
        python_loop: True when the implementation runs the workload's loop in the
            Python interpreter, so that its cost is linear in the trip count; the
            runner then measures it at a capped trip count (see
            :attr:`Workload.reduce_trip_count`) and extrapolates linearly.
    """

    build: Callable[[Args], ValueAndGrad]
    note: str
    python_loop: bool = False


@dataclasses.dataclass(frozen=True)
class Case:
    """One size of a workload.

    Attributes:
        label: short label, unique within the workload (``"n=1e6"``); empty when
            the workload has a single case.
        args: arguments of the full benchmark.
        quick_args: tiny arguments for ``--quick`` and :func:`benchmarks.run.smoke`.
    """

    label: str
    args: Args
    quick_args: Args

    def arguments(self, quick: bool) -> Args:
        """The arguments for the full run, or for the quick run when ``quick``."""
        return self.quick_args if quick else self.args


@dataclasses.dataclass(frozen=True)
class Workload:
    """A benchmark workload (see the module docstring).

    Attributes:
        number: its number in ``shared/BENCHMARKS.md``.
        name: short identifier used on the command line (``--only pow``).
        title: one-line human description.
        fn: the plain Python function; restricted to the subset zyg supports.
        hand: hand-written numba adjoint, ``hand(*args) -> (value, grad)``: an
            ``@njit`` function, or a thin Python wrapper around one that keeps a
            workspace between calls (large tapes).
        cases: the sizes measured.
        fd_step: ``fd_step(args) -> h`` for the 5-point central difference (for
            array arguments: the step along each random direction, whose entries
            are standard normal).
        exact_grad: optional closed-form gradient ``exact_grad(args)``.
        exact_rtol: tolerance against ``exact_grad`` (looser where the closed form
            is of the untruncated mathematical function, e.g. a Bessel series).
        peers: peer framework name (``"jax"``, ``"torch"``, ``"autograd"``) to
            implementation; a missing name means "not written for this framework".
        reduce_trip_count: ``reduce(args, cap) -> (smaller_args, scale) | None``;
            for peers with ``python_loop=True``: arguments with the loop's trip
            count capped at ``cap`` and the factor by which to scale the time, or
            None when the trip count is already at most ``cap``.
        argnums: the differentiated arguments (see the module docstring).
        fd_directions: how many random directions the finite-difference reference
            probes when a differentiated argument is an array.
    """

    number: int
    name: str
    title: str
    fn: Callable[..., Any]
    hand: Callable[..., tuple[Any, Any]]
    cases: tuple[Case, ...]
    fd_step: Callable[[Args], float]
    exact_grad: Optional[Callable[[Args], Any]] = None
    exact_rtol: float = 1e-9
    peers: dict[str, PeerImpl] = dataclasses.field(default_factory=dict)
    reduce_trip_count: Optional[Callable[[Args, int], Optional[tuple[Args, float]]]] = None
    argnums: tuple[int, ...] = (0,)
    fd_directions: int = 3

    def case_id(self, case: Case) -> str:
        """Identifier of ``case`` in reports: ``"pow[n=1e6]"`` or ``"sincos"``."""
        return f"{self.name}[{case.label}]" if case.label else self.name

    def case(self, label: str) -> Case:
        """The case with the given label."""
        for c in self.cases:
            if c.label == label:
                return c
        raise KeyError(f"workload {self.name!r} has no case {label!r}")
