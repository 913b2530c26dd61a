"""`Violation`: one broken rule of one collective call, as a value a report can group and sort."""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Violation:
    """One broken rule of a collective call; `str` is the rule's message, as an error lists it.

    `device` is the device whose arguments break the rule (None when no one device does), `rule` a short
    name shared by every violation of the same rule ("overlap", "out of bounds"), `rows` the rows
    involved as [start, stop) (None when the rule is not about rows). `skip` names the pieces a sanitized
    run leaves out to run the call anyway (for ragged_all_to_all, (sender's group index, its slice)
    pairs); None means the call cannot run without the broken arguments. The rendezvous fills in where
    the call is: `collective`, its `call` number over the group `members`.
    """

    device: int | None
    rule: str
    message: str
    rows: tuple[int, int] | None = None
    skip: frozenset[tuple[int, int]] | None = None
    collective: str = ""
    call: int = -1
    members: tuple[int, ...] = ()

    def __str__(self) -> str:
        return self.message

    def at(self, collective: str, call: int, members: tuple[int, ...]) -> Violation:
        """This violation, placed in call #`call` of `collective` over `members`."""
        return replace(self, collective=collective, call=call, members=members)

    def to_dict(self) -> dict:
        """The violation as JSON-ready values."""
        rows = None if self.rows is None else list(self.rows)
        return {"device": self.device, "collective": self.collective, "call": self.call,
                "members": list(self.members), "rule": self.rule, "rows": rows,
                "skipped": None if self.skip is None else sorted(map(list, self.skip)), "message": self.message}


def as_violation(found: Violation | str) -> Violation:
    """A group check's finding as a `Violation` (a plain string is a rule no run can skip)."""
    return found if isinstance(found, Violation) else Violation(None, "invalid argument", found)


def call_str(violation: Violation) -> str:
    """Where `violation` happened, e.g. `ragged_all_to_all call #0 over devices [0, 1]`."""
    return f"{violation.collective} call #{violation.call} over devices {list(violation.members)}"


def skipped_str(violation: Violation) -> str:
    """The pieces a sanitized run left out for `violation`, e.g. `send slice 1 of device 0` (empty when none)."""
    if not violation.skip:
        return ""
    members = violation.members
    return ", ".join(f"send slice {i} of device {members[s] if s < len(members) else s}"
                     for s, i in sorted(violation.skip))


def grouped(violations: list[Violation]) -> dict[tuple[int | None, str, str], list[Violation]]:
    """`violations` by (device, call, rule): devices in order (rules of no one device last), then calls in
    the order the run met them, then rules by name."""
    calls = {call_str(v): None for v in violations}
    order = {call: k for k, call in enumerate(calls)}
    groups: dict[tuple[int | None, str, str], list[Violation]] = {}
    key = lambda v: (v.device is None, v.device or 0, order[call_str(v)], v.rule)
    for v in sorted(violations, key=key):
        groups.setdefault((v.device, call_str(v), v.rule), []).append(v)
    return groups


def report(violations: list[Violation], stopped: str | None = None) -> str:
    """The violations as text, grouped by device, call and rule, each with its rows and what was skipped;
    then where the run stopped, if it did."""
    if not violations and stopped is None:
        return "no violations"
    lines = [f"{len(violations)} violation(s)"]
    device: object = object()
    for (who, call, rule), found in grouped(violations).items():
        if who != device:
            device = who
            lines.append("device " + ("(group)" if who is None else str(who)))
        lines.append(f"  {call}: {rule}")
        for v in found:
            rows = "" if v.rows is None else f"rows {v.rows[0]}:{v.rows[1]}: "
            skipped = skipped_str(v)
            lines.append(f"    {rows}{v.message}" + (f" [skipped {skipped}]" if skipped else ""))
    if stopped is not None:
        lines.append("the run stopped there: " + stopped.splitlines()[0])
    return "\n".join(lines)
