"""The benchmark workloads of ``shared/BENCHMARKS.md``, in a registry.

To add a workload, write a module beside this one that defines a
:class:`~benchmarks.workloads.base.Workload` named ``WORKLOAD`` (see ``pow_loop.py``
for one with two sizes and peers that run Python loops, ``gmm.py`` for one with
array arguments and several ``argnums``) and add it to :data:`WORKLOADS`.
"""

from __future__ import annotations

from benchmarks.workloads import (
    bessel,
    gmm,
    logreg,
    lse_loop,
    lse_np,
    lstm,
    mlp,
    ode,
    pow_loop,
    sincos,
    taylor,
)
from benchmarks.workloads.base import Args, Case, PeerImpl, ValueAndGrad, Workload

WORKLOADS: tuple[Workload, ...] = tuple(
    sorted(
        (
            sincos.WORKLOAD,
            pow_loop.WORKLOAD,
            lse_loop.WORKLOAD,
            lse_np.WORKLOAD,
            logreg.WORKLOAD,
            mlp.WORKLOAD,
            taylor.WORKLOAD,
            bessel.WORKLOAD,
            gmm.WORKLOAD,
            lstm.WORKLOAD,
            ode.WORKLOAD,
        ),
        key=lambda w: w.number,
    )
)
"""All workloads, in the order of ``shared/BENCHMARKS.md`` (3a ``lse_loop`` before
3b ``lse_np``: the sort is stable)."""


def get_workload(name: str) -> Workload:
    """The workload called ``name`` (``"sincos"``, ``"pow"``, ``"gmm"``, ...)."""
    for w in WORKLOADS:
        if w.name == name:
            return w
    raise KeyError(f"no workload {name!r}; known: {', '.join(w.name for w in WORKLOADS)}")


__all__ = ["Args", "Case", "PeerImpl", "ValueAndGrad", "Workload", "WORKLOADS", "get_workload"]
