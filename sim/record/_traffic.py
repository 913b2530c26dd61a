"""What a run's records moved, counted one way for every command and page.

Every message counts, a device's message to itself included (it arrives at once and crosses no link);
`between` counts the messages whose sender and receiver differ, and `network_bytes` their bytes: what
crossed the network. Local copy steps (pack, unpack, relayout: records of another kind than "message") are
not messages; they are counted apart. So `meshsim run`, `explain`, `draw`, `trace` and `sweep` all say
"16 messages (12 between devices, 192 bytes over the network), 8 local copies" of the same run.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sim.record._trace import Trace
from sim.record._words import counted


@dataclass(frozen=True)
class Traffic:
    """The messages of some records, those between devices and their bytes, and the local copies.

    >>> str(Traffic(messages=4, between=2, network_bytes=48, copies=4))
    '4 messages (2 between devices, 48 bytes over the network), 4 local copies'
    """

    messages: int
    between: int
    network_bytes: int
    copies: int = 0

    @classmethod
    def of(cls, trace: Trace, indices: np.ndarray | None = None) -> Traffic:
        """The traffic of `trace`'s records (of those at `indices` only, when given), read from its columns."""
        kinds, src, dst, size = (trace.column(name) for name in ("kind", "src", "dst", "size_bytes"))
        if indices is not None:
            kinds, src, dst, size = kinds[indices], src[indices], dst[indices], size[indices]
        return cls.counted(kinds, src, dst, size)

    @classmethod
    def counted(cls, kinds: np.ndarray, src: np.ndarray, dst: np.ndarray, size: np.ndarray) -> Traffic:
        """The traffic of records given as columns: each one's kind, sender, receiver and bytes."""
        sent = kinds == "message"
        between = sent & (src != dst)
        return cls(int(sent.sum()), int(between.sum()), int(size[between].sum()), int((~sent).sum()))

    @property
    def records(self) -> str:
        """What the records counted are called: 'messages', or 'messages and local copies' when some are copies."""
        return "messages and local copies" if self.copies else "messages"

    def __str__(self) -> str:
        """`words()`: the messages, then the local copies if any."""
        return self.words()

    def words(self, copies: bool = True) -> str:
        """'16 messages (12 between devices, 192 bytes over the network)', then (with `copies`) ', 8 local
        copies' when there are some."""
        said = (f"{counted(self.messages, 'message')} ({self.between} between devices, "
                f"{counted(self.network_bytes, 'byte')} over the network)")
        return said + (f", {counted(self.copies, 'local copy')}" if copies and self.copies else "")
