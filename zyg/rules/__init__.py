"""zyg's rule library: the registry and the built-in rules.

Built-in rules are written with the same public :func:`zyg.adjoint` mechanism that
users have.  Importing this package registers them.
"""
from .registry import adjoint, nondifferentiable, lookup, is_nondifferentiable, Rule  # noqa: F401
from . import scalar  # noqa: F401  (registers the scalar rules)
from . import arrays  # noqa: F401  (array rules; declares np.zeros & co. non-differentiable)
from . import special  # noqa: F401  (scipy.special and numpy's scalar ufunc forms)
from . import numpy_extra  # noqa: F401  (statistics, sorting, shapes; the scalar np.clip rule)
from . import linalg  # noqa: F401,E402  (linear algebra rules and result kinds)
from . import dispatch  # noqa: F401,E402  (the array-rule lookup over the modules above)
from . import lists  # noqa: F401,E402  (the primitive of list.append)
