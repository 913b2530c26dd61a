"""The tree all-reduce of a group without nodes (one chain of p members), its times worked out ahead.

Without nodes the tree (`collectives._tree`) is a chain: member p - 1 sends its two halves to p - 2, which
adds its own and passes them on, down to member 0, which sends the sums back up the chain. That is
2 (p - 1) hops one after another, each at an instant of its own, so run message by message (or as
`collectives._tree_steps.Programs`) every hop costs the clock a few events and the network a flow step.
Yet where the hops have their links to themselves their times follow from the flow model alone: a hop's
messages, posted together at P on the link (a, b) of a fully connected network, share its bandwidth C
(max-min fair: C / c each while c of them are on it), each arrives its latency L after its last byte
left, empty ones L after P (`sim.network._flows`), and the receiver, woken at its first message's
arrival, takes the others as they come and posts the next hop then. `Chain` works out every hop's post,
report and arrival times that way, in the order and with the float operations the clock and the network
use (`sim.network._uncontended`: `one_link_s`, `woken_s`), runs every member's program (the same operations,
so the same bytes; a float sum folded for all members at once where that gives the same bits:
`Chain._fold_at_once`) and writes the trace records of each hop at its post instant, with their arrivals.

Nothing observable changes, and the plan is taken only where that is sure:

- the group is every device of the mesh, so no other device runs meanwhile; the network is fully
  connected (one link per ordered pair, no multipath, store-and-forward or reductions in the switch), so
  a hop's link carries nothing but that hop: its sender waits until its messages have arrived;
- at the last member's join the network carries nothing and the clock holds nothing but ended
  processes, and every hop takes time (no two hops at one instant);
- during the sums' way back the members resume one by one: member m - 1 at the instant member m takes
  its halves and posts them to m + 1, m - 1 first (m takes its second half, found waiting, in an event
  the wake for its first half sets, after the one that frees m - 1). After each resume `Chain` checks
  that the resumed program only waits (on a call not yet met, or its end): it scheduled nothing, posted
  nothing, recorded nothing. Else the rest of the chain goes on message by message from that instant
  (`Programs` in the state the chain has reached, member m posting next, as it would).

Worked example, a chain of 3 (members 0, 1, 2), one float each, halves of 4 and 0 bytes, latency L,
bandwidth C, all joined at 0: member 2's hop arrives at 4 / C + L (the float) and L (the empty half);
member 1 posts at 4 / C + L, member 0 at twice that (adding then its own term), member 1 is handed the
sums at three times that and member 2 at four: the times the message-by-message run reaches.
"""

from __future__ import annotations

import math
from collections.abc import Generator
from itertools import pairwise
from typing import Any

import numpy as np

import sim
from collectives._arithmetic import identity, quick_combine
from collectives._common import row_major_everywhere
from collectives._tree_steps import Programs, Receive, Send
from sim._simpy import fire_at, idle_since, ticket
from sim.network._uncontended import clock_s, one_link_s, woken_s

__all__ = ["Chain", "chain_fits"]


def chain_fits(port: sim.Port, nodes: int) -> bool:
    """Whether the call's tree (over `nodes` nodes) may be worked out ahead (`Chain`): decided once per call,
    the parts that do not depend on the instant (a group of every mesh device without nodes, a fully
    connected network of plain links, row-major operands and results, so every member joins at the call's
    meeting)."""
    def decide() -> bool:
        network = port.transport.links.network
        members = port.group.members
        return (len(members) > 1 and len(members) == port.mesh.size and nodes == 1
                and network.topology == "fully_connected" and not network.multipath
                and not network.store_and_forward and not getattr(network, "switch_reduces", False)
                and row_major_everywhere(port.group_args))
    return port.once(("chain fits", "tree"), decide)


class _Hop:
    """One hop: `posts` (sender, receiver, key, payload, detail) posted at `post_s`, their `reports` (when
    the network reports each, when it arrives), the receiver woken to go on at `wake_s`, the sender free
    again at `free_s` (its messages arrived); `ends`: the sender's program ends with this hop's sends; `pc`:
    the receiver's operation when the hop reached it; `direct`: the receiver's last receive of the hop is
    woken by the network's report itself (then, at the instant the sender is free, the receiver would go on
    first), not found waiting when the wake for an earlier message ran (then the sender resumes first)."""

    __slots__ = ("direct", "ends", "free_s", "pc", "post_s", "posts", "reports", "wake_s")

    def __init__(self, posts: list, post_s: float, ends: bool) -> None:
        self.posts, self.post_s, self.ends = posts, post_s, ends
        self.reports: list[tuple[float, float]] = []
        self.wake_s = self.free_s = post_s
        self.pc = 0
        self.direct = False  # the receiver's last receive here woken at its report (not found waiting)

    @property
    def sender(self) -> int:
        return self.posts[0][0]

    @property
    def receiver(self) -> int:
        return self.posts[0][1]


class Chain:
    """Every member's program of one call (`collectives._tree._program`), planned ahead where it can be
    (see the module docstring), else run by `Programs`."""

    def __init__(self, port: sim.Port) -> None:
        self.programs = Programs(port)
        self.env, self.transport = self.programs.env, self.programs.transport
        self.size = len(port.group.members)
        self.joined: list[int] = []
        self.virtual = [False] * self.size  # whose programs the plan ran
        self.mark: tuple = ()
        self.hops: list[_Hop] = []
        self.parts: list[Any] = [None] * self.size
        network = self.transport.links.network  # a fully connected network's one latency and bandwidth
        self.latency_s = float(np.float64(1 * network.latency_s))
        self.bandwidth = float(np.float64(network.bandwidth_bytes_per_s))
        self.wires: dict[int, float] = {}  # bytes -> the bytes a message occupies its link with

    def _wire(self, size: int) -> float:
        wire = self.wires.get(size)
        if wire is None:
            wire = self.wires[size] = float(self.transport.wire(size))
        return wire

    def join(self, port: sim.Port, program: list, parts: tuple) -> Generator:
        """Member `port.group.index` runs `program`; returns when its part is over. `parts`: its terms and
        its result, each in halves, and the reduction (for the sums folded at once: `_fold_at_once`)."""
        j, programs = port.group.index, self.programs
        programs.ports[j], programs.programs[j] = port, program
        self.parts[j] = parts
        done = programs.done[j] = self.env.event()
        if not self.joined:
            self.mark = self._mark()
        self.joined.append(j)
        if len(self.joined) == self.size:
            self._begin()
        yield done
        if not self.virtual[j]:
            programs.finish(j)
        programs.leave()

    # ------------------------------------------------------------------------------------------- the plan

    def _mark(self) -> tuple:
        """What changes when anything else happens: the clock's instant and next event id, the records, the
        messages posted."""
        return float(self.env.now), ticket(self.env), len(self.transport.trace), self.transport._posted

    def _begin(self) -> None:
        """The last member joined: plan the chain, or start every member's program in `Programs` in the
        order they joined (at the same instant, nothing else between: as they would have started)."""
        if self._mark() != self.mark:
            raise AssertionError("tree chain: the members joined at different instants")
        if self._alone() and self._plan():
            self._run()
            return
        for j in self.joined:
            if not self.programs.start(j, self.programs.done[j]):
                fire_at(self.env, self.programs.done[j], None, float(self.env.now))
                self.virtual[j] = True

    def _alone(self) -> bool:
        """Nothing in flight, nothing due but ended processes."""
        return self.transport.links.idle() and idle_since(self.env, 0)

    def _plan(self) -> bool:
        """Every hop's times, from the programs' sizes (nothing run yet). False where the chain is not one
        hop after another (each to the member that takes it next), a hop takes no time, or the members do
        not end as the events of `_run` assume: senders that end with a hop, from some hop on, each free
        when the next hop is posted, and the last receiver and sender together."""
        programs, now = self.programs.programs, float(self.env.now)
        pc = [0] * self.size
        posts: list = []
        for j in self.joined:
            _walk(programs[j], pc, j, posts, run=False)
        hops: list[_Hop] = []
        while posts:
            sender = posts[0][0]
            hop = _Hop(posts, now if not hops else hops[-1].wake_s, pc[sender] == len(programs[sender]))
            if any(p[0] != sender or p[1] != hop.receiver for p in posts) or not self._time(hop, pc):
                return False
            hops.append(hop)
            posts = []
            _walk(programs[hop.receiver], pc, hop.receiver, posts, run=False)
        if len(hops) < 2 or any(pc[j] != len(programs[j]) for j in range(self.size)):
            return False
        ends = [hop.ends for hop in hops]
        if not ends[-1] or any(a and not b for a, b in pairwise(ends)) or any(
                hop.direct for hop in hops[ends.index(True):]):
            return False
        self.hops = hops
        return hops[-1].free_s == hops[-1].wake_s and all(
            b.post_s > a.post_s and (a.free_s == b.post_s or not a.ends) for a, b in pairwise(hops))

    def _time(self, hop: _Hop, pc: list[int]) -> bool:
        """`hop`'s reports, the receiver's wake (its receives of the hop's messages, in its program's
        order) and the sender's free time; False where the receiver does not take them next."""
        wires = [self._wire(p[3].nbytes) for p in hop.posts]
        hop.reports = one_link_s(hop.post_s, wires, self.latency_s, self.bandwidth)
        receiver = hop.receiver
        program, by_key = self.programs.programs[receiver], {p[2]: i for i, p in enumerate(hop.posts)}
        hop.pc, t = pc[receiver], -math.inf
        for _ in hop.posts:
            op = program[pc[receiver]] if pc[receiver] < len(program) else None
            if not isinstance(op, Receive) or op.key not in by_key or op.source != hop.sender:
                return False
            report_s, arrival_s = hop.reports[by_key.pop(op.key)]
            hop.direct = report_s >= t  # else reported before the member reached this receive
            t = woken_s(t, report_s, arrival_s)
            pc[receiver] += 1
        last_report = max(r for r, _ in hop.reports)
        latest = max(a for _, a in hop.reports)
        hop.wake_s, hop.free_s = t, clock_s(last_report, latest)
        return True

    # ------------------------------------------------------------------------------------------- the run

    def _run(self) -> None:
        """Run every program (the bytes), record the hops up to the first resume, set the first event."""
        if not self._fold_at_once():
            self._run_programs()
        self.virtual = [True] * self.size
        first = 1 + next(h for h, hop in enumerate(self.hops) if hop.ends)  # posted when a sender is free
        self._record_all(self.hops[:first])
        self._next(first)

    def _fold_at_once(self) -> bool:
        """Every member's result written at once where the sums allow: the chain folds member m's terms
        into the identity, then the sums of m + 1 into that (`collectives._tree._program`), and every member
        ends with member 0's sums. For a sum of float32 or float64 with no subnormal or NaN on the way
        (`quick_combine`'s condition: the same bits as one `combine` after another) that is one
        accumulation over the members' stacked halves. False (nothing written) otherwise."""
        own, halves, reduction = self.parts[0]
        if reduction != "sum" or own[0].dtype not in (np.float32, np.float64) or own[0].dtype.metadata is not None:
            return False
        order = [self.hops[0].sender] + [hop.receiver for hop in self.hops if not hop.ends]  # tail to head
        if sorted(order) != list(range(self.size)):
            return False
        sums = []
        for t in (0, 1):
            terms = np.stack([self.parts[j][0][t] for j in order])
            started = quick_combine(reduction, identity(reduction, terms.dtype), terms)
            if started is None:
                return False
            total = np.add.accumulate(started, axis=0)
            if len(order) > 1 and quick_combine(reduction, started[1:], total[:-1]) is None:
                return False
            sums.append(total[-1])
        for _, halves, _ in self.parts:
            halves[0][...], halves[1][...] = sums
        return True

    def _run_programs(self) -> None:
        """Every member's operations run in the chain's order (each receive handed its message)."""
        programs = self.programs.programs
        pc = [0] * self.size
        posts: list = []
        for j in self.joined:
            _walk(programs[j], pc, j, posts, run=True)
        for hop in self.hops:
            receiver = hop.receiver
            payloads = {key: payload for _, _, key, payload, _ in hop.posts}
            for _ in hop.posts:
                op = programs[receiver][pc[receiver]]
                op.take(payloads[op.key])
                pc[receiver] += 1
            _walk(programs[receiver], pc, receiver, [], run=True)

    def _record_all(self, hops: list[_Hop]) -> None:
        """The trace records of `hops` (posted one after another with nothing else meanwhile) as one batch
        of columns: the records `_record` makes hop by hop."""
        programs = self.programs
        members, posts = programs.members, [(hop, post) for hop in hops for post in hop.posts]
        details = [detail for _, (*_, detail) in posts]
        if any(detail.keys() != details[0].keys() for detail in details):  # no one column per key
            for hop in hops:
                self._record(hop)
            return
        times = [hop.post_s for hop, _ in posts]
        columns = {"src": [members[j] for _, (j, *_) in posts], "dst": [members[r] for _, (_, r, *_) in posts],
                   "size_bytes": [payload.nbytes for _, (*_, payload, _) in posts], "send_time_s": times,
                   "start_time_s": times, "arrival_time_s": [a for hop in hops for _, a in hop.reports],
                   "collective": [programs.collective] * len(posts), "call": [programs.call] * len(posts),
                   "kind": ["message"] * len(posts)}
        self.transport.trace.extend_columns(columns, {key: [d[key] for d in details] for key in details[0]})
        self.transport._posted += len(posts)

    def _record(self, hop: _Hop) -> None:
        """`hop`'s trace records, posted at its post instant, with their arrivals."""
        trace, transport, programs, now = self.transport.trace, self.transport, self.programs, hop.post_s
        members = programs.members
        for (j, r, _, payload, detail), (_, arrival_s) in zip(hop.posts, hop.reports):
            trace.append(members[j], members[r], payload.nbytes, now, now, arrival_s, programs.collective,
                         programs.call, detail)
        transport._posted += len(hop.posts)

    def _next(self, h: int) -> None:
        """Set the event of the instant hop h is posted at: the sender of hop h - 1, free, resumes; then the
        receiver of hop h - 1 takes its last message (found waiting when the wake for its first one ran,
        `_Hop.direct`) and posts hop h, as the clock orders them. Past the last hop, the chain's last
        instant: its sender resumes, then its receiver."""
        programs, hops = self.programs, self.hops
        if h >= len(hops):
            last = hops[-1]
            for j in (last.sender, last.receiver):
                fire_at(self.env, programs.done[j], None, last.wake_s)
            return
        event = programs.done[hops[h - 1].sender]
        event.callbacks.insert(0, lambda _: self._set_mark())
        event.callbacks.append(lambda _: self._post_next(h) if self._quiet() else self._fall_back(h))
        fire_at(self.env, event, None, hops[h].post_s)

    def _set_mark(self) -> None:
        self.mark = self._mark()

    def _post_next(self, h: int) -> None:
        """Hop h's post, its records made now; then the next instant's event."""
        self._record(self.hops[h])
        self._next(h + 1)

    def _quiet(self) -> bool:
        """Whether nothing happened since the mark but processes ending."""
        _, first, records, posted = self.mark
        transport, env = self.transport, self.env
        if (len(transport.trace), transport._posted) != (records, posted) or not transport.links.idle():
            return False
        return ticket(env) == first or idle_since(env, first)

    def _fall_back(self, h: int) -> None:
        """The program resumed at hop h's instant did something: from here on, the members still in the
        chain run their programs through `Programs`, hop h's sender first (posting it now, as it would
        next)."""
        programs, hops, hop = self.programs, self.hops, self.hops[h]
        ahead: dict[int, _Hop] = {}
        for later in hops[h:]:
            ahead.setdefault(later.receiver, later)
        for earlier in hops[:h]:
            for (j, *_), (_, arrival_s) in zip(earlier.posts, earlier.reports):
                programs.latest[j] = max(programs.latest[j], arrival_s)
        for j in range(self.size):
            later = ahead.get(j)
            if later is None:
                programs.pc[j], programs.released[j] = len(programs.programs[j]), j != hop.sender
                continue
            op = programs.programs[j][later.pc]
            programs.pc[j] = later.pc
            programs.last[j] = max(i for i, o in enumerate(programs.programs[j]) if isinstance(o, Receive))
            programs.waiting.add((j, op.source, op.key))
            self.virtual[j] = False
        programs.pc[hop.sender] = hops[h - 1].pc + len(hops[h - 1].posts)  # its receives taken
        programs.post_next(hop.sender)
        fire_at(self.env, programs.done[hop.sender], None, float(self.env.now))


def _walk(program: list, pc: list[int], j: int, posts: list, run: bool) -> None:
    """Member j's operations from `pc[j]` up to its next receive: sends collected in `posts` (their payloads
    read), the rest run when `run`."""
    i = pc[j]
    while i < len(program) and not isinstance(program[i], Receive):
        op = program[i]
        if isinstance(op, Send):
            posts.append((j, op.to, op.key, op.payload(), op.detail))
        elif run:
            op.act()
        i += 1
    pc[j] = i
