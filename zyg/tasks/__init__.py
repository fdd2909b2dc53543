"""Gradients across threads and processes (docs/tasks.md).

* Threads: code compiled for the cpu target releases the GIL (``nogil=True``,
  ``zyg/numerics.py``), and zyg's caches are filled under one build lock
  (``zyg/caches.py``), so Python threads calling gradients run in parallel and a first
  call from several threads at once builds once.
* Processes: the objects ``zyg.grad``, ``value_and_grad``, ``jacobian`` and ``hessian``
  return pickle (:mod:`zyg.tasks.pickling`): by reference to an importable function, by
  value (source, closure, globals) otherwise.
* MPI: calls of numba-mpi inside differentiated code are reversed (:mod:`zyg.tasks.mpi`,
  docs/parallel.md).
"""
from . import mpi, mpi_native, pickling, prange

pickling.install()

__all__ = ["mpi", "mpi_native", "pickling", "prange"]
