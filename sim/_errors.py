"""The exception hierarchy: one base, caller mistakes as ValueError/TypeError, protocol failures."""


class MeshError(Exception):
    """Base of every error meshsim raises on purpose."""


class InvalidArgumentError(MeshError, ValueError):
    """A caller passed a value that breaks a documented rule; raised before anything is sent."""


class InvalidTypeError(MeshError, TypeError):
    """A caller passed a value of the wrong kind (dtype, rank, Python type)."""


class ProtocolError(MeshError, RuntimeError):
    """Devices disagreed at run time: a deadlock or mismatched collectives."""
