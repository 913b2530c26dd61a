"""What moving bytes costs: `Network` (links with latency and bandwidth, the route a message takes), its
`LinkState` during a run (link occupancy), and `CopyCost` (a device's local copies)."""

from __future__ import annotations

from dataclasses import dataclass

from sim._errors import InvalidArgumentError


@dataclass(frozen=True)
class Network:
    """A fully connected switch: one directed link per ordered pair of devices.

    Every link has the same `latency_s` (alpha) and `bandwidth_bytes_per_s` (1 / beta) per direction.
    Messages on one link are serialised, so they share its bandwidth.
    """

    latency_s: float = 1e-6
    bandwidth_bytes_per_s: float = 100e9
    topology: str = "fully_connected"

    def __post_init__(self) -> None:
        if self.latency_s < 0:
            raise InvalidArgumentError(f"latency_s={self.latency_s} must be >= 0")
        if self.bandwidth_bytes_per_s <= 0:
            raise InvalidArgumentError(f"bandwidth_bytes_per_s={self.bandwidth_bytes_per_s} must be > 0")
        if self.topology != "fully_connected":
            raise InvalidArgumentError(f"topology={self.topology!r} must be 'fully_connected'")

    @classmethod
    def fully_connected(cls, latency_s: float = 1e-6, bandwidth_bytes_per_s: float = 100e9) -> Network:
        """Every device has a direct link to every other."""
        return cls(latency_s, bandwidth_bytes_per_s, "fully_connected")

    def route(self, src: int, dst: int) -> tuple[tuple[int, int], ...]:
        """The links (as (from, to) pairs) a message from `src` to `dst` crosses."""
        return () if src == dst else ((src, dst),)

    def link_latency_s(self, link: tuple) -> float:
        """The latency of `link` (a link id from `route`)."""
        return self.latency_s

    def link_bandwidth(self, link: tuple) -> float:
        """The bandwidth of `link` in bytes per second, per direction."""
        return self.bandwidth_bytes_per_s

    def transfer_s(self, size_bytes: int) -> float:
        """Time one link needs to push `size_bytes` onto the wire."""
        return size_bytes / self.bandwidth_bytes_per_s


class LinkState:
    """The network's state during one run: when each link is next free.

    A message occupies every link of its route for `size / bandwidth`, starting on each link when both
    the message and the link are ready; it arrives one latency after leaving its last link. Messages on
    one link are therefore serialised in the order they were posted, so they share its bandwidth.
    """

    def __init__(self, network: Network) -> None:
        self.network = network
        self.free_at_s: dict[tuple[int, int], float] = {}

    def occupy(self, src: int, dst: int, size_bytes: int, now_s: float) -> tuple[float, float]:
        """Book a message from `src` to `dst` posted at `now_s`; returns (start, arrival) times."""
        if src == dst:
            return now_s, now_s
        network = self.network
        transfer_s = size_bytes / network.bandwidth_bytes_per_s
        t, start = now_s, -1.0
        for link in network.route(src, dst):
            begin = self.free_at_s.get(link, 0.0)
            begin = t if t > begin else begin
            if start < 0:
                start = begin
            self.free_at_s[link] = begin + transfer_s
            t = begin + transfer_s + network.latency_s
        return start, t

    def occupy_batch(self, src: int, dsts: list[int], sizes: list[int], now_s: float) -> tuple[list, list]:
        """`occupy` for messages from `src` to each of `dsts`, posted at `now_s` in that order."""
        network = self.network
        if network.topology != "fully_connected":
            booked = [self.occupy(src, dst, size, now_s) for dst, size in zip(dsts, sizes)]
            return [b[0] for b in booked], [b[1] for b in booked]
        # one link per ordered pair: the loop of `occupy`, unrolled for speed
        free, rate, latency = self.free_at_s, network.bandwidth_bytes_per_s, network.latency_s
        starts, arrivals = [now_s] * len(dsts), [now_s] * len(dsts)
        for k, (dst, size) in enumerate(zip(dsts, sizes)):
            if dst != src:
                link = (src, dst)
                begin = free.get(link, 0.0)
                begin = now_s if now_s > begin else begin
                free[link] = end = begin + size / rate
                starts[k], arrivals[k] = begin, end + latency
        return starts, arrivals

    def busy_s(self, trace) -> dict[tuple[int, int], float]:
        """Seconds each link spent carrying the messages of `trace` (links never used are left out)."""
        columns = trace.columns()
        moved = (columns["kind"] == "message") & (columns["src"] != columns["dst"])
        busy: dict[tuple[int, int], float] = {}
        for src, dst, size in zip(columns["src"][moved].tolist(), columns["dst"][moved].tolist(),
                                  columns["size_bytes"][moved].tolist()):
            for link in self.network.route(src, dst):
                busy[link] = busy.get(link, 0.0) + size / self.network.bandwidth_bytes_per_s
        return busy


@dataclass(frozen=True)
class CopyCost:
    """What a local copy costs: `run_overhead_s` per contiguous run touched plus bytes over bandwidth.

    The defaults model an accelerator's copy engine: 200 GB/s and one 2 ns descriptor per run.

    >>> round(CopyCost().time_s(size_bytes=4096, runs=64) * 1e9, 2)   # 64 runs * 2 ns + 4096 B / 200 GB/s
    148.48
    """

    bandwidth_bytes_per_s: float = 200e9
    run_overhead_s: float = 2e-9

    def __post_init__(self) -> None:
        if not self.bandwidth_bytes_per_s > 0:
            raise InvalidArgumentError(f"bandwidth_bytes_per_s={self.bandwidth_bytes_per_s} must be > 0")
        if not self.run_overhead_s >= 0:
            raise InvalidArgumentError(f"run_overhead_s={self.run_overhead_s} must be >= 0")

    def time_s(self, size_bytes: int, runs: int) -> float:
        """Seconds to copy `size_bytes` spread over `runs` contiguous runs (0 when `runs` <= 1)."""
        return 0.0 if runs <= 1 else runs * self.run_overhead_s + size_bytes / self.bandwidth_bytes_per_s


DEFAULT_COPY_COST = CopyCost()
