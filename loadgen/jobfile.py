"""The project's own workload format: JSON lines, one job per line, with everything a replay
needs (per-task resources and constraints, user queue, weight), so that a fitted or
synthesized workload can be saved, shared and replayed exactly.

    {"job_id": "r-1", "user": "q1", "arrival": 0.0, "weight": 1.0, "estimate": 15.9,
     "tasks": [{"cpu_m": 500, "mem_mib": 512, "duration": 6.4, "constraints": [4, 20],
                "nodes": ["lm-1/n3", "lm-2/n0"]}]}

`arrival` is seconds after the workload's start; `estimate` (optional) is the scheduler's
estimate of a task's duration; `name` (optional, 1 to 200 characters) is the job's template,
shared by the runs of a recurring job (`megha synth --families`; Alibaba's job names). Jobs
from a DAG source (Alibaba) also carry `"dag"` (each stage and the stages it waits for) and
each task its `"stage"`; both are optional. A task's `"nodes"` (optional, at least one node
id) is its placement set: the nodes it may run on (where its data is local); without it the
task may run anywhere. The GM refuses a job naming a node its federation lacks.

A bad line is an `InvalidInput` naming `file:line` and the field; as with traces,
`skip_bad=True` skips and counts bad lines instead.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from common.errors import InvalidInput
from common.wire import JOB_NAME_MAX
from loadgen.trace import KEPT_ERRORS, parse_file
from loadgen.workload import ReplayJob, ReplayTask

Seconds = Annotated[float, Field(ge=0, allow_inf_nan=False)]


class _Task(BaseModel):
    model_config = ConfigDict(extra="forbid")
    cpu_m: Annotated[int, Field(gt=0)]
    mem_mib: Annotated[int, Field(gt=0)]
    duration: Seconds
    constraints: list[Annotated[int, Field(ge=0)]] = Field(default_factory=list)
    stage: str = ""
    nodes: Annotated[list[Annotated[str, Field(min_length=1)]], Field(min_length=1)] | None = None


class _Job(BaseModel):
    model_config = ConfigDict(extra="forbid")
    job_id: Annotated[str, Field(min_length=1)]
    user: Annotated[str, Field(min_length=1)]
    name: Annotated[str, Field(min_length=1, max_length=JOB_NAME_MAX)] | None = None
    arrival: Seconds
    weight: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 1.0
    estimate: Seconds | None = None
    tasks: Annotated[list[_Task], Field(min_length=1)]
    dag: dict[str, list[str]] = Field(default_factory=dict)


def _task_record(task: ReplayTask) -> dict:
    record: dict = {"cpu_m": task.cpu_m, "mem_mib": task.mem_mib, "duration": task.duration,
                    "constraints": list(task.constraints)}
    if task.stage:
        record["stage"] = task.stage
    if task.nodes is not None:
        record["nodes"] = list(task.nodes)
    return record


def job_to_line(job: ReplayJob) -> str:
    record: dict = {"job_id": job.job_id, "user": job.user}
    if job.name is not None:
        record["name"] = job.name
    record |= {"arrival": job.arrival, "weight": job.weight}
    if job.estimate is not None:
        record["estimate"] = job.estimate
    record["tasks"] = [_task_record(t) for t in job.tasks]
    if job.dag:
        record["dag"] = {stage: list(parents) for stage, parents in job.dag.items()}
    return json.dumps(record, separators=(",", ":"))


def job_from_line(text: str, where: str) -> ReplayJob:
    try:
        parsed = _Job.model_validate_json(text)
    except ValidationError as error:
        first = error.errors()[0]
        field = ".".join(str(part) for part in first["loc"]) or "line"
        raise InvalidInput(where, f"{field}: {first['msg']}") from None
    return ReplayJob(job_id=parsed.job_id, user=parsed.user, arrival=parsed.arrival,
                     weight=parsed.weight, estimate=parsed.estimate,
                     dag={stage: tuple(parents) for stage, parents in parsed.dag.items()},
                     name=parsed.name,
                     tasks=tuple(ReplayTask(t.cpu_m, t.mem_mib, t.duration,
                                            tuple(sorted(t.constraints)), t.stage,
                                            None if t.nodes is None
                                            else tuple(sorted(set(t.nodes))))
                                 for t in parsed.tasks))


def parse_job_lines(lines: Iterable[str], source: str,
                    skip_bad: bool = False) -> tuple[list[ReplayJob], int, list[str]]:
    """The jobs in arrival order (ties keep file order), the count of skipped lines and the
    first few of their errors. Job ids must be unique: a replay relies on them."""
    jobs: list[tuple[float, int, ReplayJob]] = []
    seen: dict[str, int] = {}
    skipped, errors = 0, []
    for number, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        where = f"{source}:{number}"
        try:
            job = job_from_line(text, where)
            if job.job_id in seen:
                raise InvalidInput(where, f"job_id {job.job_id!r} repeats line {seen[job.job_id]}")
        except InvalidInput as error:
            if not skip_bad:
                raise
            skipped += 1
            if len(errors) < KEPT_ERRORS:
                errors.append(str(error))
            continue
        seen[job.job_id] = number
        jobs.append((job.arrival, number, job))
    jobs.sort(key=lambda item: item[:2])
    return [job for _, _, job in jobs], skipped, errors


def read_jobs(path: str | Path, skip_bad: bool = False) -> tuple[list[ReplayJob], int, list[str]]:
    return parse_file(path, "job file",
                      lambda lines, source: parse_job_lines(lines, source, skip_bad))


def write_jobs(path: str | Path, jobs: Sequence[ReplayJob]) -> None:
    Path(path).write_text("".join(job_to_line(job) + "\n" for job in jobs), encoding="utf-8")
