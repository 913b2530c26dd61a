"""`LinkState`: the network during one run, a flow-level model of messages sharing links.

The model, precisely:

- A message from device a to device b (a != b) of S > 0 bytes is a *flow* over its route (`Network.route`,
  after the mesh's placement). From the instant it is posted it crosses every link of its route at once at
  one rate x (cut-through: the message is pipelined through the hops, so it pays one bandwidth term, at its
  bottleneck), until all S bytes have been sent at time T; it arrives at T plus the latencies of its route's
  links (one per hop; a switch's ingress ports have none, see `sim.network._topology`).
- The rates of all flows in flight are max-min fair (progressive filling, as SimGrid computes them): every
  flow's rate rises at the same pace until some link is full (the rates of its flows sum to its bandwidth);
  the flows crossing a full link keep that rate; the others keep rising, until every flow is held by a full
  link. Rates are recomputed whenever a flow starts or ends, once per simulated instant however many do, and
  a flow whose rate did not change keeps its projected end exactly (so a message alone on its links arrives
  at post + S / bandwidth + latencies, the closed form, to the last bit).
- With `Network(store_and_forward=True)` a message instead crosses its links one after another: on each, a
  flow over that link alone, then that link's latency, then the next link.
- A device's message to itself takes no time and no link; an empty message takes its route's latencies.
- On a multipath network (`Network(multipath=True)`) a message is several flows, one per minimal path, each
  with its share of the bytes (`sim.network._topology.subflows`); it arrives when the last of them does.

Progressive filling runs on all flows in flight at once, in numpy (`sim.network._fair`); a message whose
flow has its links to itself is timed ahead by the same float operations in `sim.network._uncontended`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

import numpy as np

from sim._errors import InvalidArgumentError
from sim._simpy import NORMAL, fire
from sim.network import _in_network, _topology
from sim.network._fair import max_min_rates, on_links
from sim.network._inflight import Flows, posted_columns
from sim.network._parts import Parts
from sim.network._uncontended import end_s, left_bytes

if TYPE_CHECKING:
    import simpy

    from sim.network._network import Network

_LATE = NORMAL + 1  # a step runs after every other event of its instant: it sees every message posted then
_FEW_FLOWS = 4  # dense links: counted by a bincount over all links when at most this many per flow
_DENSE_LINKS = 1 << 23  # above this many link indices (fully connected only), links in use are renumbered


class Sink(Protocol):
    """What is told when messages arrive: their slots (as given to `LinkState.send`) and arrival times."""

    def arrived(self, slots: np.ndarray, arrivals_s: np.ndarray) -> None: ...


class LinkState:
    """The network's state during one run: the flows on its links, their rates and when they end.

    `send` posts messages; each message's `Sink` hears when it arrives (see the module docstring for the
    model). `busy_s(trace)` says how long each link carried the messages of a trace at its full bandwidth.
    `env` may be any SimPy environment: its clock is read in seconds, as a float, whether it started at
    `0.0` (the simulator's) or at the integer `0` of a plain `simpy.Environment()`.
    """

    def __init__(self, network: Network, devices: int, env: simpy.Environment | None = None,
                 placement: np.ndarray | None = None) -> None:
        self.network, self.devices, self.env = network, devices, env
        self.placement = placement
        self.links = _topology.link_count(network, devices)
        self._dense = self.links <= _DENSE_LINKS or network.topology != "fully_connected"
        self._capacity = _topology.all_capacities(network, self.links, devices) if self._dense else None
        self._uniform = network.topology == "fully_connected"  # every link has the network's bandwidth
        self._base_links = self.links  # a reducing switch's adders come after (`sim.network._in_network`)
        if _in_network.reduces(network):
            self._capacity = np.concatenate([self._capacity, _in_network.capacities(network, devices)])
            self.links += _in_network.link_count(network, devices)
        self._switched: list[tuple] = []  # reductions in the switch posted since the last step
        self._flows = Flows()
        self._parts = Parts()
        self._posted: list[tuple] = []  # (src, dsts, sizes, sink id, slots) posted since the last step
        self._hops: list[tuple] = []  # store-and-forward: (sink id, slot, size, links, hop, latency) due now
        self._ahead: dict[tuple, tuple] = {}  # store-and-forward: (sink id, slot) -> (size, links, latencies, hop)
        self._sinks: dict[int, list] = {}  # sink id -> [sink, messages not yet arrived]
        self._due: set[float] = set()  # times a step is scheduled for
        self.on_settled: Callable[[], None] | None = None  # told after each step's reports (see `Transport`)
        self._next_sink = 0
        self._tabled = False  # whether some post since the last step came from `send_table` (a sender per message)

    def send(self, src: int, dsts: np.ndarray, sizes: np.ndarray, sink: Sink) -> None:
        """Post messages from mesh device `src` to each of mesh devices `dsts` (`sizes` bytes) now; `sink`
        hears of message i as slot i.

        Raises:
            InvalidArgumentError: the state was made without a SimPy environment (`env=None`, enough for
                `busy_s`), so there is no clock to send on.
        """
        if self.env is None:
            raise InvalidArgumentError("LinkState.send needs the SimPy environment whose clock it runs on: "
                                       "make it with LinkState(network, devices, env)")
        sink_id = self._next_sink
        self._next_sink += 1
        self._sinks[sink_id] = [sink, len(dsts)]
        self._posted.append((src, dsts, sizes, sink_id))
        self._schedule(float(self.env.now))  # any SimPy clock: an integer one too (simpy.Environment() starts at 0)

    def send_table(self, srcs: np.ndarray, dsts: np.ndarray, sizes: np.ndarray, sink: Sink) -> None:
        """Post messages from mesh devices `srcs[i]` to `dsts[i]` (`sizes[i]` bytes) now, as `send` posts
        them one sender at a time (the same flows, in the same order); `sink` hears of message i as slot i."""
        self.send(src=np.asarray(srcs, np.int64), dsts=dsts, sizes=sizes, sink=sink)  # type: ignore[arg-type]
        self._tabled = True

    def idle(self) -> bool:
        """Whether no message is in flight or posted and not yet started."""
        return not (len(self._flows) or self._posted or self._hops or self._switched)

    def held(self, ours: Callable[[Sink], bool]) -> tuple[list, np.ndarray, np.ndarray] | None:
        """The flows in flight when every message posted or in flight has a sink for which `ours` holds (and
        nothing else is pending): their sinks, slots and projected ends; None otherwise."""
        if self._hops or self._switched or self._ahead or self._parts.open:
            return None
        if not all(ours(entry[0]) for entry in self._sinks.values()):
            return None
        flows = self._flows
        return [self._sinks[int(i)][0] for i in flows.sink.tolist()], flows.slot.copy(), flows.finish.copy()

    def withdraw(self) -> None:
        """Drop every message posted or in flight (those `held` found): a loop that works out its own times
        takes them over. The network's steps already scheduled find nothing to do."""
        self._sinks, self._posted, self._tabled = {}, [], False
        self._flows = Flows()

    def send_reduced(self, contributors: tuple[int, ...], receivers: tuple[int, ...], size_bytes: int,
                     sink: Sink) -> None:
        """Post one shard's reduction in the switch now (`sim.network._in_network`): a flow of `size_bytes`
        from the egress ports of mesh devices `contributors` through the switch's adders to the ingress ports
        of `receivers`; `sink` hears of its arrival as slot 0."""
        if self.env is None:
            raise InvalidArgumentError("LinkState.send_reduced needs the SimPy environment whose clock it runs on")
        sink_id = self._next_sink
        self._next_sink += 1
        self._sinks[sink_id] = [sink, 1]
        self._switched.append((contributors, receivers, size_bytes, sink_id))
        self._schedule(float(self.env.now))

    def send_reduced_table(self, contributors: tuple[int, ...], multicast: bool, sizes: np.ndarray,
                           sink: Sink) -> None:
        """Post shard j's reduction for every j now, as `send_reduced` posts them one by one: `sizes[j]` bytes
        from every contributor to all of them (`multicast`) or to contributor j alone; `sink` hears of shard
        j as slot j."""
        sink_id = self._next_sink
        self._next_sink += 1
        self._sinks[sink_id] = [sink, len(sizes)]
        self._switched.append(_in_network.Table(tuple(contributors), multicast, np.asarray(sizes), sink_id))
        self._schedule(float(self.env.now))

    def _schedule(self, when_s: float) -> None:
        """Have a step run at `when_s`, after that instant's other events (once per instant)."""
        if when_s not in self._due:
            self._due.add(when_s)
            event = self.env.event()
            event.callbacks.append(lambda _: self._step(when_s))
            fire(self.env, event, None, when_s - self.env.now, _LATE)

    def _step(self, now_s: float) -> None:
        """End the flows due by now, start the ones posted since, recompute rates, plan the next step."""
        self._due.discard(now_s)
        flows = self._flows
        ended = flows.finish <= now_s
        if ended.all() and len(flows):  # every flow ends now: report them all, keep none
            self._end(slice(None))
            self._flows = flows = Flows()
        elif ended.any():
            self._end(np.flatnonzero(ended))
            flows.keep(~ended)
        elif not self._posted and not self._hops and not self._switched:
            return
        self._start(now_s)
        if len(flows):
            self._rerate(now_s)
            self._schedule(float(flows.finish.min()))
        if self.on_settled is not None:
            self.on_settled()

    def _end(self, ended: np.ndarray | slice) -> None:
        """Report the ended flows (store-and-forward: start their next hop after this one's latency)."""
        flows = self._flows
        sinks, slots = flows.sink[ended], flows.slot[ended]
        arrivals = flows.finish[ended] + flows.latency[ended]
        if self.network.store_and_forward:
            sinks, slots, arrivals = self._forward(sinks, slots, arrivals)
        whole = flows.whole[ended] if flows._whole is not None else None
        split = whole >= 0 if whole is not None else None
        if split is not None and split.any():  # a split message arrives with its last part
            done = self._parts.end(whole[split], arrivals[split])
            sinks, slots, arrivals = (np.concatenate([a[~split], b]) for a, b in zip((sinks, slots, arrivals), done))
        self._report(sinks, slots, arrivals)

    def _forward(self, sinks: np.ndarray, slots: np.ndarray, arrivals: np.ndarray) -> tuple:
        """Messages whose last hop ended; the others' next hops are due when this hop's latency is over."""
        last = np.ones(len(sinks), bool)
        for i, (sink, slot, at) in enumerate(zip(sinks.tolist(), slots.tolist(), arrivals.tolist())):
            size, route, latency, hop = self._ahead.pop((sink, slot), (0.0, (), (), 0))  # (): a switch's reduction
            if hop + 1 < len(route):
                last[i] = False
                self._ahead[(sink, slot)] = (size, route, latency, hop + 1)
                self._later(at, (sink, slot, size, route, hop + 1, latency[hop + 1]))
        return sinks[last], slots[last], arrivals[last]

    def _later(self, when_s: float, hop: tuple) -> None:
        """Start a store-and-forward hop at `when_s`."""
        event = self.env.event()
        event.callbacks.append(lambda _: (self._hops.append(hop), self._schedule(when_s)))
        fire(self.env, event, None, when_s - self.env.now, NORMAL)

    def _start(self, now_s: float) -> None:
        """Turn the messages posted since the last step into flows (or arrivals, for the instant ones)."""
        if self._posted:
            posted, self._posted = self._posted, []
            tabled, self._tabled = self._tabled, False
            self._start_messages(now_s, posted, tabled)
        if self._hops:
            hops, self._hops = self._hops, []
            sink, slot, size = (np.array([h[k] for h in hops]) for k in range(3))
            links = np.array([route[hop] for _, _, _, route, hop, _ in hops], np.int64)
            latency = np.array([latency for _, _, _, _, _, latency in hops])
            self._add(now_s, sink, slot, size.astype(np.float64), latency, np.arange(len(links)), links, links + 1)
        if self._switched:
            switched, self._switched = self._switched, []
            instant, flows = _in_network.flows(self.network, switched, self.placement, self.devices, self._base_links)
            self._report(instant[0], instant[2], now_s + instant[1])
            if flows:
                sink, slot, size, latency, flow_of, start, stop = flows
                self._add(now_s, sink, slot, size, latency, flow_of, start, stop)

    def _start_messages(self, now_s: float, posted: list[tuple], tabled: bool) -> None:
        """Flows for posted messages (`tabled`: some with a sender per message); messages to oneself arrive
        now, empty ones after their latencies."""
        (src, dst, size, sink, slot), instant = posted_columns(posted, self.placement, tabled)
        if len(instant[0]):
            isrc, idst, isink, islot = instant
            now = np.full(len(isrc), now_s)
            remote = isrc != idst
            if remote.any():
                hops = _topology.segments(self.network, isrc[remote], idst[remote], self.devices)[3]
                now[remote] += _topology.route_latency(self.network, isrc[remote], idst[remote], hops)
            self._report(isink, islot, now)
        if self.network.store_and_forward:
            self._start_hops(now_s, src, dst, size, sink, slot)
            return
        network = self.network
        if network.topology == "fully_connected" and not network.multipath:  # one link each: (src, dst)'s own
            start = src * self.devices + dst
            self._add(now_s, sink, slot, size, np.full(len(start), 1 * network.latency_s), None, start, None)
            return
        message, share, flow_of, start, stop, hops = _topology.subflows(self.network, src, dst, self.devices)
        latency = _topology.route_latency(self.network, src, dst, hops)
        del src, dst, hops
        if not self.network.multipath:  # one path per message, all of it: sub-flow i is message i
            self._add(now_s, sink, slot, size, latency, flow_of, start, stop)
            return
        parts = np.bincount(message, minlength=len(size))
        whole = np.full(len(size), -1, np.int64)
        split = parts > 1
        if split.any():
            whole[split] = self._parts.add(sink[split], slot[split], parts[split])
        self._add(now_s, sink[message], slot[message], size[message] * share, latency[message], flow_of, start,
                  stop, whole[message])

    def _start_hops(self, now_s: float, src: np.ndarray, dst: np.ndarray, size: np.ndarray, sink: np.ndarray,
                    slot: np.ndarray) -> None:
        """Store-and-forward: each message's first hop, one link; the rest wait in `_ahead`."""
        network, firsts, latencies = self.network, [], []
        for i, (a, b) in enumerate(zip(src.tolist(), dst.tolist())):
            route = network.route(a, b)
            links = [_topology.link_index(network, link, self.devices) for link in route]
            hop_latency = [network.link_latency_s(link) for link in route]
            self._ahead[(int(sink[i]), int(slot[i]))] = (float(size[i]), links, hop_latency, 0)
            firsts.append(links[0])
            latencies.append(hop_latency[0])
        links = np.array(firsts, np.int64)
        self._add(now_s, sink, slot, size, np.array(latencies), np.arange(len(links)), links, links + 1)

    def _add(self, now_s: float, sink: np.ndarray, slot: np.ndarray, size: np.ndarray, latency: np.ndarray,
             flow_of: np.ndarray | None, start: np.ndarray, stop: np.ndarray | None,
             whole: np.ndarray | None = None) -> None:
        """Put flows in flight from now (rates are set by `_rerate`); `whole` keys the parts of split messages."""
        if not len(size):
            return
        count = len(size)
        columns = {"sink": sink, "slot": slot, "left": size, "t0": np.full(count, now_s),
                   "rate": np.zeros(count), "finish": np.full(count, np.inf), "latency": latency}
        self._flows.extend(columns, flow_of, start, stop, whole)

    def _rerate(self, now_s: float) -> None:
        """Recompute every flow's rate; flows whose rate changed get their bytes left and a new end."""
        flows = self._flows
        if flows.simple:  # one link per flow: its fair share is the link's bandwidth over its flows
            if self._dense and self.links <= _FEW_FLOWS * len(flows):
                count = np.bincount(flows.start, minlength=self.links)
                rate = self._capacity[flows.start] / count[flows.start]
            elif self._dense:  # few flows over many links: count the links in use only
                _, link, count = np.unique(flows.start, return_inverse=True, return_counts=True)
                rate = self._capacity[flows.start] / count[link]
            elif self.links <= 4 * len(flows) and self._uniform:
                count = np.bincount(flows.start, minlength=self.links)
                rate = float(self.network.bandwidth_bytes_per_s) / count[flows.start]
            else:
                _, link, count = np.unique(flows.start, return_inverse=True, return_counts=True)
                rate = _topology.capacities(self.network, flows.start, self.devices) / count[link]
        else:
            rate = max_min_rates(flows.flow_of, flows.start, flows.stop, self._capacity, len(flows))
        changed = rate != flows.rate
        if changed.all():  # every rate changed (a step that started them all): no gathering
            left = left_bytes(flows.left, flows.rate, flows.t0, now_s)
            flows.left, flows.rate = left, rate
            flows.t0 = np.full(len(rate), now_s)
            flows.finish = end_s(now_s, left, rate)
            return
        changed = np.flatnonzero(changed)
        if len(changed):
            left = left_bytes(flows.left[changed], flows.rate[changed], flows.t0[changed], now_s)
            flows.left[changed], flows.t0[changed], flows.rate[changed] = left, now_s, rate[changed]
            flows.finish[changed] = end_s(now_s, left, rate[changed])

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
        bytes it carried, as the network's `Costs.wire_bytes` weighs them, over its bandwidth); links never
        used are left out."""
        columns = trace.columns(("kind", "src", "dst", "size_bytes"))
        moved = (columns["kind"] == "message") & (columns["src"] != columns["dst"])
        src, dst = columns["src"][moved], columns["dst"][moved]
        if self.placement is not None:
            src, dst = self.placement[src], self.placement[dst]
        message, share, flow_of, start, stop, _ = _topology.subflows(self.network, src, dst, self.devices)
        sizes, costs = columns["size_bytes"][moved].astype(np.float64), self.network.costs
        wire = np.where(sizes > 0, sizes / costs.efficiency + costs.overhead_bytes, 0.0)
        carried = (wire[message] * share)[flow_of]
        if self._dense:
            on = on_links(start, stop, self.links, carried)
            used = np.flatnonzero(on_links(start, stop, self.links))
            carried_on = on[used]
        else:  # fully connected on very many devices: each interval is one link
            used, link = np.unique(start, return_inverse=True)
            carried_on = np.bincount(link, carried, len(used))
        seconds = carried_on / _topology.capacities(self.network, used, self.devices)
        return {_topology.link_id(self.network, int(link), self.devices): float(t)
                for link, t in zip(used.tolist(), seconds.tolist())}
