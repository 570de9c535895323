"""The package version: part of every autotune cache key."""
__version__ = "0.1.0"
