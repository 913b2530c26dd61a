"""`Costs`: what a collective costs besides the wire: its launch, each message a member issues, the protocol's
share of a link's bandwidth, and the arithmetic of a reduction.

The network's links say how long bytes take on the wire (`Network`); a real system adds four more costs,
each charged in the simulated run where it happens and, in the same form, by the cost model behind
`algorithm='auto'` (`collectives._cost`):

- `launch_s`: once per collective call, the seconds a member waits before its first message to another
  device (a kernel launch, a collective's setup; a call that sends nothing launches nothing);
- `per_message_s`: the seconds a member spends issuing each message to another device; a member issues its
  messages one after another, and a message enters the network when it has been issued (`empty_slices`
  says whether ragged_all_to_all issues a message for an empty peer slice too: 'pay', as XLA GPU did
  before it skipped them, or 'skip');
- `efficiency` and `overhead_bytes`: a message of S > 0 bytes occupies its links as S / efficiency +
  overhead_bytes bytes would (a protocol's headers and flags, a channel's unused slots), so the bandwidth a
  message sees ramps with its size towards `efficiency` times the link's;
- `reduce_bytes_per_s`: the bytes of received data a device adds into its partial result per second.

The defaults cost nothing, so a `Network` without `costs=` times every call by its links alone.

>>> costs = Costs(efficiency=0.8, overhead_bytes=1024)
>>> costs.wire_bytes(8192)     # 8192 / 0.8 + 1024
11264.0
>>> Costs(reduce_bytes_per_s=1e12).reduce_s(2e6) * 1e6   # microseconds to add 2 MB
2.0
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

from sim._errors import InvalidArgumentError, InvalidTypeError

EMPTY_SLICES = ("skip", "pay")


@dataclass(frozen=True)
class Costs:
    """The costs of a collective call besides its bytes on the wire (see the module docstring).

    Attributes:
        launch_s: seconds a member of a call waits before its first message to another device (>= 0).
        per_message_s: seconds a member spends issuing each message it sends to another device (>= 0).
        empty_slices: 'pay' (ragged_all_to_all issues a message per peer slice, empty ones included) or
            'skip' (only non-empty slices are issued).
        efficiency: the fraction of a link's bandwidth a message's payload gets (0 < efficiency <= 1).
        overhead_bytes: bytes each non-empty message adds on the wire (>= 0).
        reduce_bytes_per_s: bytes of received data a device adds per second (> 0; inf: free).
    """

    launch_s: float = 0.0
    per_message_s: float = 0.0
    empty_slices: str = "skip"
    efficiency: float = 1.0
    overhead_bytes: float = 0.0
    reduce_bytes_per_s: float = math.inf

    def __post_init__(self) -> None:
        for name, rule, ok in (("launch_s", "a finite number >= 0", lambda v: v >= 0 and math.isfinite(v)),
                               ("per_message_s", "a finite number >= 0", lambda v: v >= 0 and math.isfinite(v)),
                               ("efficiency", "in (0, 1]", lambda v: 0 < v <= 1),
                               ("overhead_bytes", "a finite number >= 0", lambda v: v >= 0 and math.isfinite(v)),
                               ("reduce_bytes_per_s", "> 0", lambda v: v > 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise InvalidTypeError(f"{name}={value!r} must be a number")
            if math.isnan(value) or not ok(value):
                raise InvalidArgumentError(f"{name}={value} must be {rule} (a cost of Costs)")
        if self.empty_slices not in EMPTY_SLICES:
            raise InvalidArgumentError(f"empty_slices={self.empty_slices!r} must be 'pay' (a message is issued "
                                       f"per peer slice, empty ones too) or 'skip' (only non-empty slices)")

    @property
    def free(self) -> bool:
        """Whether every cost is nil (the run times messages by their links alone)."""
        return self == FREE

    @property
    def pays_empty_slices(self) -> bool:
        """Whether ragged_all_to_all issues a message for an empty peer slice."""
        return self.empty_slices == "pay"

    def wire_bytes(self, size_bytes: float) -> float:
        """The bytes a message of `size_bytes` occupies its links as (0 for an empty message)."""
        if size_bytes <= 0:
            return 0.0
        return size_bytes / self.efficiency + self.overhead_bytes

    def issue_s(self, messages: float) -> float:
        """Seconds a member spends issuing `messages` messages."""
        return messages * self.per_message_s

    def describe(self) -> str:
        """The costs that are not nil, e.g. 'efficiency 0.83' or 'per_message_s 1.2e-05, empty_slices pay'
        ('' when every cost is nil)."""
        return ", ".join(f"{field.name} {getattr(self, field.name):g}" if field.name != "empty_slices"
                         else f"empty_slices {self.empty_slices}" for field in fields(self)
                         if getattr(self, field.name) != getattr(FREE, field.name))

    def reduce_s(self, size_bytes: float) -> float:
        """Seconds a device spends adding `size_bytes` of received data into its partial result."""
        return size_bytes / self.reduce_bytes_per_s if size_bytes > 0 else 0.0


FREE = Costs()
