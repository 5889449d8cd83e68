"""One federated simulation run whose event log and outcome two tests compare: a mechanism
that must change the engine's steps and nothing else (coalescing, held ticks) is run with
and without, and everything but the steps must be equal."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from common.federation import Federation
from common.models import JobSpec
from simulator.eventlog import SimLog
from simulator.federated import FederatedSimulation


def recorded_run(path: Path, federation: Federation, jobs: list[JobSpec], seed: int,
                 setup: Callable[[FederatedSimulation], None], **options) -> tuple:
    """(the event log's bytes, ended, completions, virtual seconds, steps) of one run with
    its invariants checked; `setup` adjusts the simulation before it runs."""
    log = SimLog("megha", path)
    sim = FederatedSimulation(federation, jobs, log, seed=seed, **options)
    setup(sim)
    outcome = sim.run()
    sim.check_invariants()
    log.close()
    return (path.read_bytes(), outcome.ended, outcome.completions, outcome.virtual_s,
            outcome.steps)
