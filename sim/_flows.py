"""`LinkState`: the network during one run, a flow-level model of messages sharing links.

The model, precisely:

- A message from device a to device b (a != b) of S > 0 bytes is a *flow* over its route (`Network.route`,
  after the mesh's placement). From the instant it is posted it crosses every link of its route at once at
  one rate x (cut-through: the message is pipelined through the hops, so it pays one bandwidth term, at its
  bottleneck), until all S bytes have been sent at time T; it arrives at T plus the latencies of its route's
  links (one per hop; a switch's ingress ports have none, see `sim._topology`).
- The rates of all flows in flight are max-min fair (progressive filling, as SimGrid computes them): every
  flow's rate rises at the same pace until some link is full (the rates of its flows sum to its bandwidth);
  the flows crossing a full link keep that rate; the others keep rising, until every flow is held by a full
  link. Rates are recomputed whenever a flow starts or ends, once per simulated instant however many do, and
  a flow whose rate did not change keeps its projected end exactly (so a message alone on its links arrives
  at post + S / bandwidth + latencies, the closed form, to the last bit).
- With `Network(store_and_forward=True)` a message instead crosses its links one after another: on each, a
  flow over that link alone, then that link's latency, then the next link.
- A device's message to itself takes no time and no link; an empty message takes its route's latencies.

Progressive filling runs on all flows in flight at once, in numpy: a flow's links are rows of one incidence
table, every round saturates the links of the smallest fair share (to within a relative 1e-9, so links equal
up to rounding fill together) and freezes their flows. A link's used capacity is kept as integer counts of
frozen flows times the rounds' levels, so the rates do not depend on the order flows were posted in.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import numpy as np
from simpy.core import NORMAL

from sim import _topology

if TYPE_CHECKING:
    import simpy

    from sim._network import Network

_LATE = NORMAL + 1  # a step runs after every other event of its instant: it sees every message posted then
_TOLERANCE = 1e-9
_DENSE_LINKS = 1 << 22  # above this many link indices, the links in use are renumbered densely per step


class Sink(Protocol):
    """What is told when messages arrive: their slots (as given to `LinkState.send`) and arrival times."""

    def arrived(self, slots: np.ndarray, arrivals_s: np.ndarray) -> None: ...


def max_min_rates(flow_of: np.ndarray, link_of: np.ndarray, capacity: np.ndarray, flows: int) -> np.ndarray:
    """Max-min fair rates of `flows` flows; flow `flow_of[i]` crosses link `link_of[i]` (0 <= link <
    len(capacity), every flow crosses at least one link), link l carries `capacity[l]` in all.

    >>> max_min_rates(np.array([0, 1, 1]), np.array([0, 0, 1]), np.array([2.0, 0.5]), 2).tolist()
    [1.5, 0.5]
    """
    rate = np.zeros(flows)
    used = np.zeros(len(capacity))
    links = len(capacity)
    while len(flow_of):
        count = np.bincount(link_of, minlength=links)
        busy = np.flatnonzero(count)
        share = (capacity[busy] - used[busy]) / count[busy]
        level = max(float(share.min()), 0.0)
        full = np.zeros(links, bool)
        full[busy[share <= level * (1 + _TOLERANCE)]] = True
        frozen = np.zeros(flows, bool)
        frozen[flow_of[full[link_of]]] = True
        drop = frozen[flow_of]
        used += np.bincount(link_of[drop], minlength=links) * level
        rate[frozen] = level
        keep = ~drop
        flow_of, link_of = flow_of[keep], link_of[keep]
    return rate


class _Flows:
    """The flows in flight, as columns, and their route incidence (`flow_of`, `link_of`)."""

    NAMES = ("sink", "slot", "size", "left", "t0", "rate", "finish", "latency")

    def __init__(self) -> None:
        self.sink = np.zeros(0, np.int64)
        self.slot = np.zeros(0, np.int64)
        for name in ("size", "left", "t0", "rate", "finish", "latency"):
            setattr(self, name, np.zeros(0))
        self.flow_of = np.zeros(0, np.int64)
        self.link_of = np.zeros(0, np.int64)

    def __len__(self) -> int:
        return len(self.sink)

    def keep(self, mask: np.ndarray) -> None:
        """Keep only the flows where `mask` is True."""
        renumber = np.cumsum(mask) - 1
        on = mask[self.flow_of]
        self.flow_of, self.link_of = renumber[self.flow_of[on]], self.link_of[on]
        for name in self.NAMES:
            setattr(self, name, getattr(self, name)[mask])

    def extend(self, columns: dict[str, np.ndarray], offsets: np.ndarray, links: np.ndarray) -> None:
        """Append flows (`columns` by name) whose routes are `links[offsets[i]:offsets[i+1]]`."""
        first = len(self)
        flows = np.repeat(np.arange(first, first + len(offsets) - 1), np.diff(offsets))
        self.flow_of = np.concatenate([self.flow_of, flows])
        self.link_of = np.concatenate([self.link_of, links])
        for name in self.NAMES:
            setattr(self, name, np.concatenate([getattr(self, name), columns[name]]))


class LinkState:
    """The network's state during one run: the flows on its links, their rates and when they end.

    `send` posts messages; each message's `Sink` hears when it arrives (see the module docstring for the
    model). `busy_s(trace)` says how long each link carried the messages of a trace at its full bandwidth.
    """

    def __init__(self, network: Network, devices: int, env: simpy.Environment | None = None,
                 placement: np.ndarray | None = None) -> None:
        self.network, self.devices, self.env = network, devices, env
        self.placement = placement
        self.links = _topology.link_count(network, devices)
        self._dense = self.links <= _DENSE_LINKS
        self._capacity = _topology.capacities(network, np.arange(self.links), devices) if self._dense else None
        self._flows = _Flows()
        self._posted: list[tuple] = []  # (src, dsts, sizes, sink id, slots) posted since the last step
        self._hops: list[tuple] = []  # store-and-forward: (sink id, slot, size, route, hop) due to start now
        self._ahead: dict[tuple, tuple] = {}  # store-and-forward: (sink id, slot) -> (size, route, hop)
        self._sinks: dict[int, list] = {}  # sink id -> [sink, messages not yet arrived]
        self._due: set[float] = set()  # times a step is scheduled for
        self._next_sink = 0

    def send(self, src: int, dsts: np.ndarray, sizes: np.ndarray, sink: Sink) -> None:
        """Post messages from mesh device `src` to each of mesh devices `dsts` (`sizes` bytes) now; `sink`
        hears of message i as slot i."""
        sink_id = self._next_sink
        self._next_sink += 1
        self._sinks[sink_id] = [sink, len(dsts)]
        self._posted.append((src, dsts, sizes, sink_id))
        self._schedule(self.env.now)

    def _schedule(self, when_s: float) -> None:
        """Have a step run at `when_s`, after that instant's other events (once per instant)."""
        if when_s not in self._due:
            self._due.add(when_s)
            event = self.env.event()
            event.callbacks.append(lambda _: self._step(when_s))
            event._ok, event._value = True, None
            self.env.schedule(event, _LATE, when_s - self.env.now)

    def _step(self, now_s: float) -> None:
        """End the flows due by now, start the ones posted since, recompute rates, plan the next step."""
        self._due.discard(now_s)
        flows = self._flows
        ended = flows.finish <= now_s
        if ended.any():
            self._end(np.flatnonzero(ended))
            flows.keep(~ended)
        elif not self._posted and not self._hops:
            return
        self._start(now_s)
        if len(flows):
            self._rerate(now_s)
            self._schedule(float(flows.finish.min()))

    def _end(self, ended: np.ndarray) -> None:
        """Report the ended flows (store-and-forward: start their next hop after this one's latency)."""
        flows = self._flows
        sinks, slots = flows.sink[ended], flows.slot[ended]
        arrivals = flows.finish[ended] + flows.latency[ended]
        if self.network.store_and_forward:
            sinks, slots, arrivals = self._forward(sinks, slots, arrivals)
        self._report(sinks, slots, arrivals)

    def _forward(self, sinks: np.ndarray, slots: np.ndarray, arrivals: np.ndarray) -> tuple:
        """Messages whose last hop ended; the others' next hops are due when this hop's latency is over."""
        last = np.ones(len(sinks), bool)
        for i, (sink, slot, at) in enumerate(zip(sinks.tolist(), slots.tolist(), arrivals.tolist())):
            size, route, hop = self._ahead.pop((sink, slot))
            if hop + 1 < len(route):
                last[i] = False
                self._ahead[(sink, slot)] = (size, route, hop + 1)
                self._later(at, (sink, slot, size, route, hop + 1))
        return sinks[last], slots[last], arrivals[last]

    def _later(self, when_s: float, hop: tuple) -> None:
        """Start a store-and-forward hop at `when_s`."""
        event = self.env.event()
        event.callbacks.append(lambda _: (self._hops.append(hop), self._schedule(when_s)))
        event._ok, event._value = True, None
        self.env.schedule(event, NORMAL, when_s - self.env.now)

    def _start(self, now_s: float) -> None:
        """Turn the messages posted since the last step into flows (or arrivals, for the instant ones)."""
        if self._posted:
            posted, self._posted = self._posted, []
            self._start_messages(now_s, posted)
        if self._hops:
            hops, self._hops = self._hops, []
            sink, slot, size = (np.array([h[k] for h in hops]) for k in range(3))
            links = np.array([route[hop] for _, _, _, route, hop in hops], np.int64)
            self._add(now_s, sink, slot, size.astype(np.float64), np.arange(len(links) + 1), links)

    def _start_messages(self, now_s: float, posted: list[tuple]) -> None:
        """Flows for posted messages; messages to oneself arrive now, empty ones after their latencies."""
        counts = [len(dsts) for _, dsts, _, _ in posted]
        src = np.repeat(np.array([p[0] for p in posted], np.int64), counts)
        dst = np.concatenate([np.asarray(p[1], np.int64) for p in posted])
        size = np.concatenate([np.asarray(p[2], np.float64) for p in posted])
        sink = np.repeat(np.array([p[3] for p in posted], np.int64), counts)
        slot = np.arange(len(dst)) - np.repeat(np.cumsum(counts) - counts, counts)
        if self.placement is not None:
            src, dst = self.placement[src], self.placement[dst]
        local = src == dst
        if local.any():
            self._report(sink[local], slot[local], np.full(int(local.sum()), now_s))
            src, dst, size, sink, slot = src[~local], dst[~local], size[~local], sink[~local], slot[~local]
        offsets, links = _topology.routes(self.network, src, dst, self.devices)
        empty = size == 0
        if empty.any():
            latency = np.add.reduceat(_topology.latencies(self.network, links, self.devices), offsets[:-1])
            self._report(sink[empty], slot[empty], now_s + latency[empty])
            hops = np.diff(offsets)[~empty]
            on = np.repeat(~empty, np.diff(offsets))
            src, size, sink, slot, links = src[~empty], size[~empty], sink[~empty], slot[~empty], links[on]
            offsets = np.concatenate([[0], np.cumsum(hops)])
        if self.network.store_and_forward:
            for i, (s, k) in enumerate(zip(sink.tolist(), slot.tolist())):
                self._ahead[(s, k)] = (size[i], links[offsets[i]:offsets[i + 1]].tolist(), 0)
            links, offsets = links[offsets[:-1]], np.arange(len(size) + 1)
        self._add(now_s, sink, slot, size, offsets, links)

    def _add(self, now_s: float, sink: np.ndarray, slot: np.ndarray, size: np.ndarray, offsets: np.ndarray,
             links: np.ndarray) -> None:
        """Put flows in flight from now (rates are set by `_rerate`)."""
        if not len(size):
            return
        latency = np.add.reduceat(_topology.latencies(self.network, links, self.devices), offsets[:-1])
        count = len(size)
        columns = {"sink": sink, "slot": slot, "size": size, "left": size, "t0": np.full(count, now_s),
                   "rate": np.zeros(count), "finish": np.full(count, np.inf), "latency": latency}
        self._flows.extend(columns, offsets, links)

    def _rerate(self, now_s: float) -> None:
        """Recompute every flow's rate; flows whose rate changed get their bytes left and a new end."""
        flows = self._flows
        if self._dense:
            link_of, capacity = flows.link_of, self._capacity
        else:
            used, link_of = np.unique(flows.link_of, return_inverse=True)
            capacity = _topology.capacities(self.network, used, self.devices)
        if len(link_of) == len(flows):  # one link per flow: its fair share is the link's bandwidth / its flows
            count = np.bincount(link_of, minlength=len(capacity))
            rate = capacity[link_of] / count[link_of]
        else:
            rate = max_min_rates(flows.flow_of, link_of, capacity, len(flows))
        changed = np.flatnonzero(rate != flows.rate)
        if len(changed):
            old = flows.rate[changed]
            left = np.maximum(flows.left[changed] - old * (now_s - flows.t0[changed]), 0.0)
            flows.left[changed], flows.t0[changed], flows.rate[changed] = left, now_s, rate[changed]
            flows.finish[changed] = now_s + left / rate[changed]

    def _report(self, sinks: np.ndarray, slots: np.ndarray, arrivals: np.ndarray) -> None:
        """Tell each sink which of its messages arrived, and when."""
        if not len(sinks):
            return
        if len(sinks) > 1 and np.any(sinks[1:] < sinks[:-1]):
            order = np.argsort(sinks, kind="stable")
            sinks, slots, arrivals = sinks[order], slots[order], arrivals[order]
        cuts = np.flatnonzero(sinks[1:] != sinks[:-1]) + 1
        starts, stops = np.concatenate([[0], cuts]).tolist(), np.concatenate([cuts, [len(sinks)]]).tolist()
        for start, stop in zip(starts, stops):
            entry = self._sinks[int(sinks[start])]
            entry[1] -= stop - start
            if entry[1] == 0:
                del self._sinks[int(sinks[start])]
            entry[0].arrived(slots[start:stop], arrivals[start:stop])

    def busy_s(self, trace) -> dict[tuple, float]:
        """Seconds each link would need to carry the messages of `trace` alone at its full bandwidth (the
        bytes it carried over its bandwidth); links never used are left out."""
        columns = trace.columns()
        moved = (columns["kind"] == "message") & (columns["src"] != columns["dst"])
        src, dst = columns["src"][moved], columns["dst"][moved]
        if self.placement is not None:
            src, dst = self.placement[src], self.placement[dst]
        offsets, links = _topology.routes(self.network, src, dst, self.devices)
        carried = np.repeat(columns["size_bytes"][moved].astype(np.float64), np.diff(offsets))
        used, inverse = np.unique(links, return_inverse=True)
        seconds = np.bincount(inverse, carried, len(used)) / _topology.capacities(self.network, used, self.devices)
        return {_topology.link_id(self.network, int(link), self.devices): float(s)
                for link, s in zip(used.tolist(), seconds.tolist())}

