"""The simulator's errors: the package's base and caller-mistake errors (from `layouts`), `ProtocolError` and
`MemoryLimitError`."""

from layouts._errors import InvalidArgumentError, InvalidTypeError, MeshError

__all__ = ["InvalidArgumentError", "InvalidTypeError", "MemoryLimitError", "MeshError", "ProtocolError"]


class ProtocolError(MeshError, RuntimeError):
    """Devices disagreed at run time: a deadlock or mismatched collectives."""


class MemoryLimitError(MeshError, MemoryError):
    """A run's device memories would hold more than its memory limit (`max_memory_bytes`, `--max-memory`)."""
