"""The backlog's pass (common/pending.py) tries exactly the tasks, in exactly the order, that
walking every job in policy order and every task of it in queue order would, skipping tasks
whose demand is blocked; it only skips the walk. Checked against that walk on random
backlogs."""

from __future__ import annotations

from collections import deque

from hypothesis import given, settings
from hypothesis import strategies as st

from common.gm_records import JobRecord
from common.lifecycle import TaskState
from common.models import JobSpec, TaskSpec
from common.pending import Backlog
from common.policies.job import FifoPolicy, JobProgress
from common.reasons import Reason
from common.resources import Resources

SHAPES = [(frozenset(), 1000, 1024, None), (frozenset({3}), 1000, 1024, None),
          (frozenset(), 2000, 1024, None)]


def make_job(n: int, user: str, shapes: list[int]) -> JobRecord:
    job_id = f"j{n}"
    tasks = tuple(TaskSpec(f"{job_id}/{i}", job_id, Resources(*SHAPES[s][1:3]), SHAPES[s][0])
                  for i, s in enumerate(shapes))
    spec = JobSpec(job_id, user, tasks, 0.0)
    record = JobRecord(spec, JobProgress(len(tasks), n, 0.0, None))
    record.key = (0, 0.0, -n if n % 3 == 0 else n)  # not arrival order for every job
    record.add_tasks()
    return record


jobs_strategy = st.lists(
    st.tuples(st.sampled_from(["u1", "u2"]),
              st.lists(st.integers(0, len(SHAPES) - 1), min_size=1, max_size=6)),
    min_size=1, max_size=8)


@settings(max_examples=200, deadline=None)
@given(jobs_strategy,
       st.lists(st.tuples(st.integers(0, 40), st.booleans()), max_size=6),  # requeues
       st.dictionaries(st.tuples(st.sampled_from(["u1", "u2"]), st.integers(0, 2)),
                       st.integers(0, 4)),  # per demand: how many fit before one fails
       st.sets(st.tuples(st.sampled_from(["u1", "u2"]), st.integers(0, 2))))  # blocked before
def test_a_pass_tries_what_walking_every_task_would(jobs_spec, requeues, room, blocked_before):
    backlog = Backlog(FifoPolicy())
    jobs: dict[str, JobRecord] = {}
    walk: dict[str, deque] = {}  # the reference: each job's pending tasks in queue order
    for n, (user, shapes) in enumerate(jobs_spec):
        job = make_job(n, user, shapes)
        jobs[job.spec.job_id] = job
        walk[job.spec.job_id] = deque(job.tasks)
        for task in job.tasks:
            backlog.add(task)
    # some tasks leave and come back first (a refused launch): front of their job's queue
    all_tasks = [task for job in jobs.values() for task in job.tasks]
    for index, front in requeues:
        task = all_tasks[index % len(all_tasks)]
        backlog.remove(task)
        walk[task.job.spec.job_id].remove(task)
        if front:
            backlog.requeue(task)
            walk[task.job.spec.job_id].appendleft(task)
        else:
            backlog.add(task)
            walk[task.job.spec.job_id].append(task)
    for user, s in blocked_before:
        backlog.block((user, SHAPES[s]), Reason.NO_CAPACITY)

    def demand_of(task):
        return (task.job.spec.user, task.shape)

    # the reference walk
    left = {(user, SHAPES[s]): k for (user, s), k in room.items()}
    blocked = {(user, SHAPES[s]) for user, s in blocked_before}
    expected = []
    for job in sorted(jobs.values(), key=lambda j: (j.key, j.spec.job_id)):
        for task in walk[job.spec.job_id]:
            demand = demand_of(task)
            if demand in blocked:
                continue
            expected.append(task.spec.task_id)
            if left.get(demand, 0) > 0:
                left[demand] -= 1
            else:
                blocked.add(demand)

    tried = []
    left = {(user, SHAPES[s]): k for (user, s), k in room.items()}

    def try_place(task) -> bool:
        tried.append(task.spec.task_id)
        demand = demand_of(task)
        if left.get(demand, 0) > 0:
            left[demand] -= 1
            task.state = TaskState.PLACING
            return True
        backlog.block(demand, Reason.NO_CAPACITY)
        return False

    backlog.place(jobs, try_place, None)
    assert tried == expected
    assert not backlog.levels[0].ready  # what still waits is blocked
    placed = {task.spec.task_id for task in all_tasks if task.state is TaskState.PLACING}
    for job in jobs.values():
        remaining = [t.spec.task_id for t in job.pending]
        assert remaining == [t.spec.task_id for t in walk[job.spec.job_id]
                             if t.spec.task_id not in placed]
        backlog.validate("gm", job)
    backlog.validate_index("gm")
