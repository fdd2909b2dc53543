"""The version of zyg (part of every on-disk cache key)."""
__version__ = "0.1.0"
