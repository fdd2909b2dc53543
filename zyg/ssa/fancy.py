"""Advanced (numpy "fancy") indexing: an index part that is an int or bool array.

``x[idx]`` with an integer array ``idx`` gathers elements (with repeats), ``x[mask]``
with a boolean array selects them; both give a new array, never a view. This module
works out what such an index gives from the kinds alone, for the kind analysis, the
alias analysis and the pullbacks. numba supports one advanced index part per
subscript, combined with basic parts (slices, integers): zyg supports the same.
"""
from __future__ import annotations


from .analysis import array_parts, fancy_ndim, is_fancy  # noqa: F401  (defined beside their users)
