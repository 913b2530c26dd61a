"""The rendezvous: a collective starts on a group once every member has reached it, with matching calls.

Each arrival is compared with the group's first arrival only, so a call over n devices costs n
comparisons. When the last member arrives, the collective's group check sees every member's arguments and
reports every broken rule at once, before any message is sent. A sanitized rendezvous records the broken
rules instead and lets the call run without the pieces they name, when the collective can (`Violation.skip`).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import simpy

from sim._errors import InvalidArgumentError, ProtocolError
from sim._frozen import quick_init
from sim.network._mesh import Group
from sim.record._violation import Violation, as_violation

if TYPE_CHECKING:
    from sim.engine._port import Port
    from sim.engine._together import Gathering, Joint


@quick_init
@dataclass(frozen=True, slots=True)
class Collective:
    """One collective call as one device makes it.

    `params` must be equal on every member of the group (else the devices disagree about which
    collective comes next). `validate(args_by_index)` sees every member's `args` and returns the broken
    rules, all of them (as `Violation`s, or plain messages), before any message is sent.
    `protocol(port, args)` is the device's part of the message exchange, a SimPy generator returning the
    device's result. `together(gathering)`, when given, may run the call for every member at once when the
    last has arrived (`sim.engine._together`): it returns a `Joint` that does, or None to let each member
    run `protocol`.
    """

    name: str
    group: Group
    params: tuple
    args: Any
    protocol: Callable[[Port, Any], Generator]
    validate: Callable[[list[Any]], list[Violation | str]] | None = None
    together: Callable[[Gathering], Joint | None] | None = None


@dataclass(frozen=True)
class Waiting:
    """What a device waits on in a collective: which call, over which devices."""

    collective: str
    call: int
    members: tuple[int, ...]

    def __str__(self) -> str:
        return f"waits in {self.call_str()}"

    def call_str(self) -> str:
        """The call alone: `psum (call #0 over devices [0, 1])`."""
        return f"{self.collective} (call #{self.call} over {devices_str(self.members)})"


def devices_str(members: tuple[int, ...]) -> str:
    """`members` for a message: all of them when few, else the ends and the count."""
    if len(members) <= 8:
        return f"devices {list(members)}"
    shown = ", ".join(map(str, members[:4])) + ", ..., " + ", ".join(map(str, members[-2:]))
    return f"{len(members)} devices [{shown}]"


class _Meeting:
    """The members that have reached one call so far.

    Once all have, `args` holds every member's arguments by group index and `shared` holds what the
    members' protocols worked out once about the call (`Port.once`; never a result). `skipped`
    holds the pieces a sanitized run leaves out of the call (see `Violation.skip`). `view` is what the
    members' ports see of it; `order` the members' group indices in the order they arrived.
    """

    __slots__ = ("args", "count", "event", "exchange", "first", "first_device", "order", "shared", "skipped")

    def __init__(self, collective: Collective, device: int, event: simpy.Event, exchange: int) -> None:
        self.first, self.first_device = collective, device
        self.args: list[Any] = [None] * collective.group.size
        self.order: list[int] = []
        self.count = 0
        self.event = event
        self.exchange = exchange
        self.shared: dict = {}
        self.skipped: frozenset = frozenset()

    @property
    def view(self) -> MeetingView:
        """A view for a member's port, made on each request: a view kept here would make the meeting a cycle,
        which only the garbage collector frees."""
        return MeetingView(self)


class MeetingView:
    """What a member's `Port` sees of its call's meeting: the exchange number that keeps the call's messages
    apart, every member's arguments, the pieces a sanitized run skips, and the facts worked out once."""

    __slots__ = ("_meeting",)

    def __init__(self, meeting: _Meeting) -> None:
        self._meeting = meeting

    @property
    def exchange(self) -> int:
        return self._meeting.exchange

    @property
    def args(self) -> list[Any]:
        """Every member's arguments, by group index (read them; the list is the meeting's own)."""
        return self._meeting.args

    @property
    def skipped(self) -> frozenset:
        return self._meeting.skipped

    def once(self, key: Hashable, compute: Callable[[], Any]) -> Any:
        """`compute()` the first time a member asks for `key`, the same value afterwards."""
        shared = self._meeting.shared
        if key not in shared:
            shared[key] = compute()
        return shared[key]


class Rendezvous:
    """Meetings keyed by (group, call number); each finished meeting gets a fresh exchange number, which
    keeps the messages of different calls apart.

    When `sanitize`, every broken rule is appended to `violations` (placed in its call), and a call whose
    violations all name pieces to skip runs without them instead of raising."""

    def __init__(self, env: simpy.Environment, sanitize: bool = False) -> None:
        self.env = env
        self.sanitize = sanitize
        self.violations: list[Violation] = []
        self._meetings: dict[tuple[Hashable, int], _Meeting] = {}
        self._exchanges = 0

    def arrive(self, device: int, call: int, collective: Collective, group_key: Hashable = None) -> _Meeting:
        """Register `device`'s arrival; returns the meeting, whose `event` fires when all have arrived and
        whose `exchange` number keeps this call's messages apart. `group_key` names the group's members
        (by default the members themselves): any key equal for equal members.

        Raises:
            ProtocolError: `device` called a different collective (or other parameters) than the first
                member to arrive.
            InvalidArgumentError: the last member arrived and the group's arguments break a rule (when
                sanitizing: a rule no skipped piece mends).
        """
        group = collective.group
        key = (group.members if group_key is None else group_key, call)
        meeting = self._meetings.get(key)
        if meeting is None:
            meeting = self._meetings[key] = _Meeting(collective, device, self.env.event(), self._exchanges)
            self._exchanges += 1
        else:
            first = meeting.first
            if first.name != collective.name or (first.params is not collective.params
                                                 and first.params != collective.params):
                _mismatched(meeting, device, call, collective)
        index = group.index
        meeting.args[index] = collective.args
        meeting.order.append(index)
        meeting.count += 1
        if meeting.count == len(group.members):
            del self._meetings[key]
            if collective.validate is not None:
                violations = collective.validate(meeting.args)
                if violations:
                    self._broken(meeting, call, collective, violations)
            meeting.event.succeed()
        return meeting

    def _broken(self, meeting: _Meeting, call: int, collective: Collective, found: list[Violation | str]) -> None:
        """Raise the call's violations, or (sanitizing) record them and mark the pieces the call skips."""
        if not self.sanitize:
            raise _invalid(collective.name, found)
        violations = [as_violation(v).at(collective.name, call, collective.group.members) for v in found]
        self.violations += violations
        if any(v.skip is None for v in violations):
            raise _invalid(collective.name, found)
        meeting.skipped = frozenset().union(*(v.skip for v in violations))


SHOWN_VIOLATIONS = 50


def _invalid(name: str, violations: list[Violation | str]) -> InvalidArgumentError:
    """The error listing a call's broken rules: the first `SHOWN_VIOLATIONS` in its message, all of them in
    its `violations` attribute."""
    shown = [str(v) for v in violations[:SHOWN_VIOLATIONS]]
    more = len(violations) - len(shown)
    error = InvalidArgumentError(f"{name}: {len(violations)} invalid argument(s)\n  " + "\n  ".join(shown)
                                 + (f"\n  ... and {more} more (all of them in this error's `violations`)"
                                    if more else ""))
    error.violations = [str(v) for v in violations]  # type: ignore[attr-defined]
    return error


def _mismatched(meeting: _Meeting, device: int, call: int, collective: Collective) -> None:
    """Raise the error of `device` calling `collective` where the call's first member called another."""
    first = meeting.first
    raise ProtocolError(
        f"mismatched collectives: call #{call} over {devices_str(collective.group.members)}: "
        f"device {meeting.first_device} called {first.name}{first.params}, "
        f"device {device} called {collective.name}{collective.params}"
    )
