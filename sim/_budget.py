"""Memory and work guards: how many devices a mesh may have, what a device and a message cost, the memory
limit, and the work limit (how many messages a run may send).

A run's memory is its arrays plus, per device, a first memory page, a greenlet, a SimPy process and a
program record, plus, per message, its trace row and the message in flight. The costs below are measured
and rounded up: estimates made with them are rough, meant to refuse a run that cannot fit before anything
is allocated, not to account for every byte. Each collective call is estimated as it starts
(`check_call`), before its results are allocated or its first message is sent.
"""

from __future__ import annotations

import os

from sim._errors import InvalidArgumentError, InvalidTypeError, MemoryLimitError

MAX_DEVICES = 1 << 20
DEVICE_BYTES = 16 << 10  # measured about 12 KiB: a memory page, a greenlet, a SimPy process, a program record
# measured 270 B (a 4096-device psum) to 650 B (a 1024-device all_to_all, whose messages are all in flight at once)
# per message, peak RSS over messages: a trace row and the message in flight
MESSAGE_BYTES = 1 << 9
FALLBACK_MAX_MEMORY_BYTES = 8 << 30
# The messages a run may send unless told otherwise: about a second of the fastest collectives' messages
# (all_gather, all_to_all: ~700,000 a second) and under two minutes of the slowest (a reduction's 'direct'
# messages: ~10,000 a second), so no run with the default budget goes on silently for long.
DEFAULT_MAX_MESSAGES = 1_000_000
_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9, "t": 10**12,
          "tb": 10**12, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}


def default_max_memory_bytes() -> int:
    """Half the machine's physical memory, or 8 GiB where the system does not say how much it has."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        total = 0
    return total // 2 if total > 0 else FALLBACK_MAX_MEMORY_BYTES


def format_bytes(size: int) -> str:
    """`size` in the largest binary unit that keeps it >= 1, e.g. '74.5 GiB', '512 B'."""
    for shift, unit in ((40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")):
        if size >= 1 << shift:
            return f"{size / (1 << shift):.3g} {unit}"
    return f"{size} B"


def parse_bytes(text: str) -> int:
    """A size such as '4GiB', '500MB', '1.5 GiB' or '1000000' (bytes) as a number of bytes.

    Raises:
        InvalidArgumentError: `text` is not a positive number with an optional unit (B, KB, MB, GB, TB,
            KiB, MiB, GiB, TiB; case does not matter).
    """
    stripped = str(text).strip().lower()
    number = stripped.rstrip("abgikmt ")
    unit = stripped[len(number):].strip()
    try:
        size = float(number) * _UNITS[unit]
    except (KeyError, ValueError):
        size = -1
    if not size >= 1 or size != size or size == float("inf"):
        raise InvalidArgumentError(f"max_memory={text!r} must be a positive size such as '4GiB', '500MB' or a "
                                   f"number of bytes")
    return int(size)


def check_limit(max_memory_bytes: int | None) -> int:
    """`max_memory_bytes` checked (a positive int), or the default when it is None."""
    if max_memory_bytes is None:
        return default_max_memory_bytes()
    if isinstance(max_memory_bytes, bool) or not isinstance(max_memory_bytes, int):
        raise InvalidTypeError(f"max_memory_bytes={max_memory_bytes!r} must be an int (bytes) or None")
    if max_memory_bytes < 1:
        raise InvalidArgumentError(f"max_memory_bytes={max_memory_bytes!r} must be positive")
    return max_memory_bytes


def check_memory(what: str, parts: dict[str, int], max_memory_bytes: int | None) -> int:
    """Raise when the estimate `parts` (bytes by what needs them) exceeds the limit; return the total.

    Raises:
        InvalidArgumentError: reading `{what} needs about <total> of memory (<part> <bytes>, ...), more than
            max_memory_bytes=<limit> (<limit in units>)`.
    """
    limit = check_limit(max_memory_bytes)
    total = sum(parts.values())
    if total > limit:
        shown = ", ".join(f"{name} {format_bytes(size)}" for name, size in parts.items() if size)
        raise InvalidArgumentError(f"{what} needs about {format_bytes(total)} of memory ({shown}), more than "
                                   f"max_memory_bytes={limit} ({format_bytes(limit)})")
    return total


def check_device_count(axes: dict, size: int) -> None:
    """Raise when a mesh of `axes` has more than `MAX_DEVICES` devices (`size` of them)."""
    if size > MAX_DEVICES:
        raise InvalidArgumentError(f"axes={axes!r} make {size} devices; a mesh may have at most "
                                   f"{MAX_DEVICES} (2**20)")


def check_messages(what: str, messages: int, max_messages: int | None) -> int:
    """Raise when `messages` (an estimate of what a run sends) exceeds `max_messages`; return the limit.

    `max_messages` None is `DEFAULT_MAX_MESSAGES`.

    Raises:
        InvalidTypeError: `max_messages` is not an int or None.
        InvalidArgumentError: `max_messages` is not positive, or reading `{what} sends about <messages>
            messages, more than max_messages=<limit>`.
    """
    if max_messages is None:
        max_messages = DEFAULT_MAX_MESSAGES
    if isinstance(max_messages, bool) or not isinstance(max_messages, int):
        raise InvalidTypeError(f"max_messages={max_messages!r} must be an int (messages) or None")
    if max_messages < 1:
        raise InvalidArgumentError(f"max_messages={max_messages!r} must be positive")
    if messages > max_messages:
        raise InvalidArgumentError(f"{what} sends about {messages:,} messages, more than max_messages={max_messages}")
    return max_messages


_CALL_KNOB = ("raise the limit with sim.Mesh(..., max_memory_bytes=N) (or --max-memory SIZE, scenarios.load(path, "
              "max_memory_bytes=N)), make the operands smaller, or pass them as abstract payloads for a timing study "
              "(sim.ShapeDtypeStruct(shape, dtype) operands, payload = \"abstract\" in a scenario): the same trace "
              "and times without the bytes")
_ABSTRACT_CALL_KNOB = ("the operands are abstract payloads already (their results hold no bytes; the trace's rows, one "
                       "per message, do): raise the limit with sim.Mesh(..., max_memory_bytes=N) (or --max-memory "
                       "SIZE, scenarios.load(path, max_memory_bytes=N)), or send fewer messages (fewer devices in "
                       "the group, or an algorithm that sends fewer: `meshsim explain` lists them)")


def check_call(what: str, device: int, parts: dict[str, int], held_bytes: int, max_memory_bytes: int,
               abstract: bool = False) -> None:
    """Refuse a collective call whose estimate `parts` (bytes by what needs them: the results the call
    allocates on every device, its trace) would take the run past `max_memory_bytes`, its memories already
    holding `held_bytes`. The advice the refusal gives suits operands that are `abstract` payloads already
    (their results hold no bytes: only the limit or the messages can change).

    >>> try:
    ...     check_call("psum", 0, {"outputs": 400, "trace": 512}, 200, 1000)
    ... except MemoryLimitError as error:
    ...     print(str(error)[:101])
    device 0: psum needs about 912 B of memory (outputs 400 B, trace 512 B) on top of the 200 B the run's

    Raises:
        MemoryLimitError: the call would not fit, naming the device, the call, the estimate and its parts.
    """
    total = sum(parts.values())
    if held_bytes + total <= max_memory_bytes:
        return
    shown = ", ".join(f"{name} {format_bytes(size)}" for name, size in parts.items() if size)
    raise MemoryLimitError(f"device {device}: {what} needs about {format_bytes(total)} of memory ({shown}) on top "
                           f"of the {format_bytes(held_bytes)} the run's memories hold, more than "
                           f"max_memory_bytes={max_memory_bytes} ({format_bytes(max_memory_bytes)}); "
                           f"{_ABSTRACT_CALL_KNOB if abstract else _CALL_KNOB}")
