"""zyg functions inside other AD systems: PyTorch (``zyg.torch``) and JAX (``zyg.jax``).

``zyg.torch.function(f)`` wraps ``f`` in a ``torch.autograd.Function`` and
``zyg.jax.function(f)`` in a ``jax.custom_vjp`` over ``jax.pure_callback``: the forward
pass runs zyg's compiled primal of ``f``, the backward pass its pullback
(docs/interop.md).  ``import zyg`` imports neither PyTorch nor JAX: the attributes
``zyg.torch`` and ``zyg.jax`` load these modules on first use.
"""
