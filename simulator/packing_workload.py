"""Packing instances from a job trace, built the way the packing paper built its own.

The paper took production jobs of a Google trace with at most a few dozen tasks, kept each
task's duration and memory request, mapped the trace's machines at random onto a smaller
cluster, and weighted jobs three ways. Our traces (Sparrow format) give arrival times and task
durations only, so:

- **jobs**: the trace's first `jobs` jobs with at most `max_tasks` tasks; durations as given.
- **demands** are synthesized per job (a job's tasks ask alike, as in real traces): cpu and
  memory each log-uniform between 2% and 50% of a machine, independently. Machines have
  capacity 1 in each. `resources=1` (the paper's model: it packs memory alone) keeps the
  memory demand only; the draws are the same, so the two models differ in cpu alone.
- **placement**: `single`: each task's one machine, uniformly at random (the trace's machine
  mapped onto ours), nowhere else. `placement`: `local` distinct random machines at the
  trace's duration (3, as HDFS keeps three replicas), any other machine at `remote_factor`
  times it.
- **weights**: `equal` (all 1); `random` (uniform in [1, 10]); `priority`: the trace has no
  priorities, so each job draws one of Google's priority bands with the shares the 2011 trace
  reports (free 0-1: 30%, batch 2-8: 60%, production 9-11: 10%, uniform within a band) and its
  weight is 1 + priority. Say so wherever a result uses them.
- **releases**: offline, all at 0 (the backlog a saturated cluster holds); online, the
  trace's arrival times scaled so the offered load (the bottleneck resource's demanded volume
  over its capacity, over the arrival span) is `load`.

Deterministic for a seed; the same seed gives every algorithm the same instance.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

from common.errors import InvalidInput
from loadgen.trace import TraceJob
from simulator.models.packing.model import Instance, Job, Task

WEIGHTS = ("equal", "random", "priority")
DEMAND_RANGE = (0.02, 0.5)  # of a machine, per resource
RANDOM_WEIGHTS = (1.0, 10.0)
PRIORITY_BANDS = ((range(0, 2), 0.3), (range(2, 9), 0.6), (range(9, 12), 0.1))


def _weight(scheme: str, rng: random.Random) -> float:
    if scheme == "equal":
        return 1.0
    if scheme == "random":
        return rng.uniform(*RANDOM_WEIGHTS)
    if scheme == "priority":
        bands, shares = zip(*PRIORITY_BANDS, strict=True)
        band = rng.choices(bands, weights=shares)[0]
        return 1.0 + rng.choice(band)
    raise InvalidInput("--weights", f"unknown weight scheme {scheme!r} (known: "
                                    f"{', '.join(WEIGHTS)})")


def _log_uniform(rng: random.Random, low: float, high: float) -> float:
    return math.exp(rng.uniform(math.log(low), math.log(high)))


def offered_load(instance: Instance) -> float:
    """The bottleneck resource's demanded local volume over its capacity across the span of
    releases (infinite when every job is released at once)."""
    releases = [job.release for job in instance.jobs]
    span = max(releases) - min(releases)
    if span <= 0:
        return math.inf
    worst = 0.0
    for resource in range(instance.resources):
        capacity = sum(c[resource] for c in instance.capacities)
        volume = sum(task.duration * task.demand[resource] for task in instance.tasks())
        worst = max(worst, volume / (capacity * span))
    return worst


def build_instance(trace: Sequence[TraceJob], *, jobs: int, max_tasks: int, machines: int,
                   setting: str, weights: str, seed: int, load: float | None = None,
                   local: int = 3, remote_factor: float = 1.5, resources: int = 1) -> Instance:
    """`load=None`: offline (every release at 0); otherwise online at that offered load.
    `resources`: 1 (memory, the paper's model) or 2 (cpu and memory)."""
    if resources not in (1, 2):
        raise InvalidInput("--resources", f"must be 1 (memory) or 2 (cpu and memory), got "
                                          f"{resources!r}")
    if setting not in ("single", "placement"):
        raise InvalidInput("--settings", f"unknown setting {setting!r} (single, placement)")
    if machines < 1:
        raise InvalidInput("--machines", f"must be >= 1, got {machines}")
    if setting == "placement" and not 1 <= local <= machines:
        raise InvalidInput("--local", f"must be between 1 and --machines ({machines}), "
                                      f"got {local}")
    if remote_factor < 1:
        raise InvalidInput("--remote-factor", f"must be >= 1, got {remote_factor}")
    if load is not None and not (math.isfinite(load) and load > 0):
        raise InvalidInput("--loads", f"an offered load must be > 0, got {load}")
    chosen = [job for job in trace if 0 < job.width <= max_tasks][:jobs]
    if not chosen:
        raise InvalidInput("--max-tasks", f"no job of the trace has 1 to {max_tasks} tasks")
    rng = random.Random(seed)
    records = []
    for j, source in enumerate(chosen):
        demand = tuple(_log_uniform(rng, *DEMAND_RANGE) for _ in range(2))[2 - resources:]
        weight = _weight(weights, rng)
        tasks = []
        for i, duration in enumerate(source.durations):
            if setting == "single":
                placement, factor = frozenset({rng.randrange(machines)}), None
            else:
                placement, factor = frozenset(rng.sample(range(machines), local)), remote_factor
            tasks.append(Task(j, i, demand, max(duration, 1e-3), placement, factor))
        release = source.arrival - chosen[0].arrival
        records.append(Job(j, f"trace-line-{source.line}", weight, release, tuple(tasks)))
    capacities = tuple((1.0,) * resources for _ in range(machines))
    description = {"setting": setting, "weights": weights, "jobs": len(records),
                   "resources": resources,
                   "tasks": sum(len(job.tasks) for job in records), "machines": machines,
                   "max_tasks": max_tasks, "seed": seed}
    if setting == "placement":
        description |= {"local_machines": local, "remote_factor": remote_factor}
    if load is None:
        records = [Job(job.id, job.name, job.weight, 0.0, job.tasks) for job in records]
        description["mode"] = "offline"
    else:
        unscaled = Instance(capacities, tuple(records))
        scale = offered_load(unscaled) / load if offered_load(unscaled) < math.inf else 1.0
        records = [Job(job.id, job.name, job.weight, job.release * scale, job.tasks)
                   for job in records]
        description |= {"mode": "online", "load": load}
    return Instance(capacities, tuple(records), description).validate()
