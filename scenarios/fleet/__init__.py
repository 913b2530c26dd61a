"""Independent jobs on Dask distributed (a local cluster, or a running scheduler): the one part of meshsim
that imports Dask, and only when a cluster starts."""

from scenarios.fleet._fleet import (
    COMPILE_THREADS,
    LOOPBACK,
    FleetError,
    Job,
    check_dask,
    check_scheduler,
    fleet,
    run_jobs,
)

__all__ = ["COMPILE_THREADS", "LOOPBACK", "FleetError", "Job", "check_dask", "check_scheduler", "fleet",
           "run_jobs"]
