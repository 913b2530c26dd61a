"""The exception base of the whole package, in the bottom layer so no layer rewraps another's errors.

Every error meshsim raises on purpose is a `MeshError`. Caller mistakes are `InvalidArgumentError` (a
`ValueError`) or `InvalidTypeError` (a `TypeError`), raised eagerly with `name=value` and the rule; the
layers above add their own subclasses (`sim.ProtocolError`, `oracles.OracleError`,
`scenarios.ScenarioError`).
"""


class MeshError(Exception):
    """Base of every error meshsim raises on purpose."""


class InvalidArgumentError(MeshError, ValueError):
    """A caller passed a value that breaks a documented rule; raised before anything is sent."""


class InvalidTypeError(MeshError, TypeError):
    """A caller passed a value of the wrong kind (dtype, rank, Python type)."""
