"""The engine: a `Simulation` composed of SimPy's clock, the driver (device programs as greenlets), the
rendezvous (a call starts when its group has met) and the transport (messages over the network's links).
It is the only part of `sim` that touches SimPy's clock and greenlets."""

from sim.engine._driver import DeviceContext, current, current_or_none
from sim.engine._engine import Simulation
from sim.engine._perturb import Perturbation
from sim.engine._rendezvous import Collective, Waiting
from sim.engine._transport import Message, Port

__all__ = [
    "Collective", "DeviceContext", "Message", "Perturbation", "Port", "Simulation", "Waiting", "current",
    "current_or_none",
]
