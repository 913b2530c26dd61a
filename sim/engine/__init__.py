"""The engine: a `Simulation` composed of SimPy's clock, the driver (device programs as greenlets), the
rendezvous (a call starts when its group has met) and the transport (messages over the network's links).
It is the only part of `sim` that touches SimPy's clock and greenlets."""

from sim.engine._call import Calls
from sim.engine._driver import Activity, DeviceContext, Phase, current, current_or_none
from sim.engine._engine import Simulation
from sim.engine._group import Steps, steps_fit
from sim.engine._lanes import Pending, compute, start
from sim.engine._options import RunOptions
from sim.engine._perturb import Perturbation
from sim.engine._port import Port
from sim.engine._rendezvous import Collective, MeetingView, Waiting
from sim.engine._together import Gathering, Joint, Pairs
from sim.engine._transport import Message

__all__ = [
    "Activity", "Calls", "Collective", "DeviceContext", "Gathering", "Joint", "MeetingView", "Message", "Pairs",
    "Pending", "Perturbation", "Phase", "Port", "RunOptions", "Simulation", "Steps", "Waiting", "compute", "current",
    "current_or_none", "start",
    "steps_fit",
]
