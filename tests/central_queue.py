"""An independent model of one central queue on `slots` one-slot machines: the job order alone,
no delays, no views, no messages. It checks what a one-GM, one-LM slot-mode simulation's mean
JCT comes from: if the federated simulator schedules in the order its job policy says, the two
agree to within the small delays the simulator keeps (docs/reproducing.md).

Orders: `fifo`, jobs by arrival and a job's tasks in turn; `fewest-tasks`, the job with the
fewest unfinished tasks (waiting or running) first, ties by arrival. The inputs are read from
a simulation's own event log (`job_arrived`: arrival and width; `task_done`: each task's
runtime), so the model sees the same jobs and the same durations.
"""

from __future__ import annotations

import heapq
import json
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class ModelJob:
    seq: int  # arrival order
    arrival: float
    runtimes: list[float]  # per task, in task order
    started: int = 0  # tasks started
    unfinished: int = field(init=False)
    end: float = 0.0

    def __post_init__(self) -> None:
        self.unfinished = len(self.runtimes)


def jobs_of_log(log: Path) -> dict[str, ModelJob]:
    """The jobs of a simulation's event log, with every task's runtime."""
    jobs: dict[str, ModelJob] = {}
    runtimes: dict[str, dict[int, float]] = {}
    with log.open() as lines:
        for line in lines:
            if '"job_arrived"' in line:
                event = json.loads(line)
                jobs[event["job"]] = ModelJob(len(jobs), event["arrival"],
                                              [0.0] * event["tasks"])
            elif '"task_done"' in line:
                event = json.loads(line)
                index = int(event["task"].rsplit("/", 1)[1])
                runtimes.setdefault(event["job"], {})[index] = event["runtime"]
    for job_id, job in jobs.items():
        done = runtimes[job_id]
        job.runtimes = [done[i] for i in range(len(job.runtimes))]
    return jobs


def central_queue_jct(jobs: dict[str, ModelJob], slots: int, order: str) -> dict[str, float]:
    """Each job's completion time minus its arrival, one central queue serving `order`."""
    arrivals = sorted(jobs.values(), key=lambda job: (job.arrival, job.seq))
    waiting: list[ModelJob] = []  # jobs with tasks not started, kept in `order`
    ends: list[tuple[float, int, ModelJob]] = []  # (end, tiebreak, job) of running tasks
    free, now, next_arrival, count = slots, 0.0, 0, 0

    def key(job: ModelJob) -> tuple:
        return (job.unfinished, job.arrival, job.seq) if order == "fewest-tasks" else (
            job.arrival, job.seq)

    while next_arrival < len(arrivals) or ends:
        upcoming = arrivals[next_arrival].arrival if next_arrival < len(arrivals) else None
        if ends and (upcoming is None or ends[0][0] <= upcoming):
            now, _, job = heapq.heappop(ends)
            free += 1
            job.unfinished -= 1
            if job.unfinished == 0:
                job.end = now
        else:
            now = upcoming
            waiting.append(arrivals[next_arrival])
            next_arrival += 1
        if ends and ends[0][0] == now or (next_arrival < len(arrivals)
                                          and arrivals[next_arrival].arrival == now):
            continue  # take every event of this instant before deciding
        while free and waiting:
            job = min(waiting, key=key)
            runtime = job.runtimes[job.started]
            job.started += 1
            if job.started == len(job.runtimes):
                waiting.remove(job)
            free -= 1
            count += 1
            heapq.heappush(ends, (now + runtime, count, job))
    return {job_id: job.end - job.arrival for job_id, job in jobs.items()}


def request_queue_starts(tasks: list[tuple[float, str, float]], slots: dict[str, int],
                         tail: bool) -> list[float]:
    """Each task's start on one central queue of task requests, given (arrival, kind, runtime)
    per task and the slots of each kind: a task of kind "any" takes a free slot of the first
    kind (in name order) that has one, any other only a slot of its own kind (a placement
    constraint). At every instant, once its arrivals and ends are in, the queue is walked once
    in order. `tail=False`: a task that finds no slot keeps its place; `tail=True`: it goes
    to the end of the queue, as the Megha paper's GM puts it, and comes up again later."""
    free = dict(slots)
    starts = [0.0] * len(tasks)
    order = sorted(range(len(tasks)), key=lambda i: (tasks[i][0], i))
    queue: deque[int] = deque()
    ends: list[tuple[float, int, str]] = []
    next_arrival, now = 0, 0.0

    def take(i: int) -> str | None:
        kind = tasks[i][1]
        for candidate in (sorted(free) if kind == "any" else [kind]):
            if free.get(candidate, 0):
                free[candidate] -= 1
                return candidate
        return None

    while next_arrival < len(order) or ends:
        upcoming = tasks[order[next_arrival]][0] if next_arrival < len(order) else None
        now = ends[0][0] if ends and (upcoming is None or ends[0][0] <= upcoming) else upcoming
        while ends and ends[0][0] == now:
            free[heapq.heappop(ends)[2]] += 1
        while next_arrival < len(order) and tasks[order[next_arrival]][0] == now:
            queue.append(order[next_arrival])
            next_arrival += 1
        if tail:
            for _ in range(len(queue)):
                i = queue.popleft()
                slot = take(i)
                if slot is None:
                    queue.append(i)
                else:
                    starts[i] = now
                    heapq.heappush(ends, (now + tasks[i][2], i, slot))
        else:
            for i in list(queue):
                slot = take(i)
                if slot is not None:
                    queue.remove(i)
                    starts[i] = now
                    heapq.heappush(ends, (now + tasks[i][2], i, slot))
    return starts
