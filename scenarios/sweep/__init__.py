"""Timing sweeps: a sweep file's points (collective x mesh x size x network ...), each measured on the
simulator as a fleet job, its rows in JSONL and CSV, and the plots (matplotlib, imported only to draw)."""

from scenarios.sweep._measure import COLUMNS, OPERATIONS, Operation, measure, refused
from scenarios.sweep._plot import FORMATS, check_output, plot, series
from scenarios.sweep._sweep import MAX_POINTS, PARAMETERS, SWEPT, Point, Sweep, load_sweep
from scenarios.sweep._sweep_run import RESULTS, TABLE, finish, pending, run_points
from scenarios.sweep._sweep_values import build_network, network_label

__all__ = [
    "COLUMNS", "FORMATS", "MAX_POINTS", "OPERATIONS", "PARAMETERS", "RESULTS", "SWEPT", "TABLE", "Operation",
    "Point", "Sweep", "build_network", "check_output", "finish", "load_sweep", "measure", "network_label",
    "pending", "plot", "refused", "run_points", "series",
]
