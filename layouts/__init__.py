"""Device-local array layouts: how a logical array sits in the bytes of one device memory."""

from layouts._layout import Layout, decode, encode, nbytes

__all__ = ["Layout", "decode", "encode", "nbytes"]
