"""The simulator's errors: the package's base and caller-mistake errors (from `layouts`), and `ProtocolError`."""

from layouts._errors import InvalidArgumentError, InvalidTypeError, MeshError

__all__ = ["InvalidArgumentError", "InvalidTypeError", "MeshError", "ProtocolError"]


class ProtocolError(MeshError, RuntimeError):
    """Devices disagreed at run time: a deadlock or mismatched collectives."""
