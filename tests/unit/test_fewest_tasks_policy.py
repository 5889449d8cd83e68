"""The `fewest-tasks` job policy: the job with the fewest unfinished tasks first, ties by
arrival (the published Megha simulator's order), on its own, in the GM's backlog, and in a GM
core whose cluster is short of capacity. Every case is worked by hand in its comment."""

from __future__ import annotations

import argparse
import random

from harness import Federation
from one_gm_federation import one_gm_file

from common.federation import load_federation
from common.gm_records import JobRecord
from common.lifecycle import TaskState
from common.models import JobSpec, TaskSpec
from common.pending import Backlog
from common.policies.job import JOB_DEFAULTS, JOB_POLICIES, JobOptions, JobProgress
from common.policies.jobs.fewest import FewestTasksPolicy
from common.resources import Resources
from simulator.run_settings import add_policy_arguments


def progress(seq: int, tasks: int) -> JobProgress:
    return JobProgress(tasks, seq, float(seq), None)


def order(policy, jobs: list[JobProgress]) -> list[int]:
    return [job.seq for job in sorted(jobs, key=policy.order_key)]


def test_fewest_tasks_is_registered_without_a_ladder_or_pilots() -> None:
    policy = JOB_POLICIES.make("fewest-tasks")
    assert isinstance(policy, FewestTasksPolicy) and policy.name == "fewest-tasks"
    assert policy.ladder is None  # one queue, by `order_key`
    assert policy.options == JOB_DEFAULTS  # the family's options; it reads none of them
    options = JobOptions()
    assert JOB_POLICIES.make("fewest-tasks", options).options is options
    job = progress(1, 5)
    policy.admit(job, random.Random(0))
    assert job.pilots == frozenset() and job.estimate is None and job.level == 0
    assert not policy.task_finished(job, 0, 1.0)  # never holds tasks, so never releases any


def test_three_jobs_of_5_2_and_3_tasks_are_served_2_3_5() -> None:
    policy = JOB_POLICIES.make("fewest-tasks")
    five, two, three = progress(1, 5), progress(2, 2), progress(3, 3)
    assert order(policy, [five, two, three]) == [2, 3, 1]
    assert [policy.order_key(job) for job in (five, two, three)] == [(5, 1), (2, 2), (3, 3)]
    assert [policy.worker_priority(job) for job in (five, two, three)] == [5.0, 2.0, 3.0]


def test_the_order_follows_the_unfinished_tasks_as_they_finish() -> None:
    policy = JOB_POLICIES.make("fewest-tasks")
    five, two, three = progress(1, 5), progress(2, 2), progress(3, 3)
    # two tasks of the 5-task job finish: 3 left, as many as the 3-task job, which arrived
    # later: 2 (2 left), 5 (3 left, first), 3 (3 left)
    five.finish(10.0)
    five.finish(10.0)
    assert order(policy, [five, two, three]) == [2, 1, 3]
    # a third: 2 left, as many as the 2-task job, which arrived later: 5, 2, 3
    five.finish(10.0)
    assert order(policy, [five, two, three]) == [1, 2, 3]
    # one task of the 3-task job finishes: 2 left, a three-way tie, by arrival
    three.finish(1.0)
    assert order(policy, [five, two, three]) == [1, 2, 3]
    # the 2-task job's first finishes: 1 left, alone at the front
    two.finish(1.0)
    assert order(policy, [five, two, three]) == [2, 1, 3]
    assert policy.worker_priority(two) == 1.0
    # the runtime of a finished task does not matter, only the count
    long_one, short_one = progress(4, 4), progress(5, 4)
    long_one.finish(1000.0)
    short_one.finish(0.1)
    short_one.finish(0.1)
    assert order(policy, [long_one, short_one]) == [5, 4]


def test_equal_counts_go_by_arrival() -> None:
    policy = JOB_POLICIES.make("fewest-tasks")
    jobs = [progress(4, 3), progress(1, 3), progress(3, 1), progress(2, 3)]
    assert order(policy, jobs) == [3, 1, 2, 4]


def test_the_federation_file_selects_fewest_tasks() -> None:
    federation = load_federation(one_gm_file('[policies]\njob = "fewest-tasks"'))
    assert federation.policies.job == "fewest-tasks"
    assert federation.gm_config("g1").job_policy == "fewest-tasks"


def test_the_simulate_command_offers_it() -> None:
    parser = argparse.ArgumentParser()
    add_policy_arguments(parser.add_argument_group("policies"), ("job_policy",))
    assert parser.parse_args(["--job-policy", "fewest-tasks"]).job_policy == "fewest-tasks"


# -- in the GM's backlog -------------------------------------------------------------------------


def record(policy, job_id: str, seq: int, width: int) -> JobRecord:
    tasks = tuple(TaskSpec(f"{job_id}/{i}", job_id, Resources(1000, 1024), frozenset())
                  for i in range(width))
    job = JobRecord(JobSpec(job_id, "u1", tasks, 0.0), JobProgress(width, seq, 0.0, None))
    job.key = policy.order_key(job.progress)
    job.add_tasks()
    return job


def test_the_backlog_refiles_a_job_as_its_tasks_finish_and_not_on_a_requeue() -> None:
    policy = FewestTasksPolicy()
    backlog = Backlog(policy)
    jobs: dict[str, JobRecord] = {}

    def arrive(job: JobRecord) -> None:
        jobs[job.spec.job_id] = job
        for task in job.tasks:
            backlog.add(task)

    def place(n: int) -> list[str]:
        """A pass that places `n` tasks: their ids, in the order placed."""
        placed = []

        def try_place(task) -> bool:
            placed.append(task.spec.task_id)
            task.state = TaskState.PLACING
            return True

        backlog.place(jobs, try_place, None, bound=n)
        for job in jobs.values():
            backlog.validate("gm", job)
        backlog.validate_index("gm")
        return placed

    def finish(job: JobRecord, index: int) -> None:
        """What the GM does when a task reports done (`GlobalMaster._task_done`)."""
        job.tasks[index].state = TaskState.DONE
        job.progress.finish(1.0)
        policy.task_finished(job.progress, index, 1.0)
        backlog.refile(job)

    wide = record(policy, "wide", 1, 6)
    arrive(wide)
    assert place(3) == ["wide/0", "wide/1", "wide/2"]  # alone: 3 of its 6 go
    narrow = record(policy, "narrow", 2, 4)
    arrive(narrow)
    # 6 unfinished against 4: the narrow job first, though it came later
    assert place(1) == ["narrow/0"]
    # its placement is refused and comes back to the front of its job: no task finished, so
    # no count and no key changed, and it is placed again at once
    task = narrow.tasks[0]
    task.state = TaskState.PENDING
    backlog.requeue(task, refused=True)
    assert narrow.key == (4, 2)
    assert place(1) == ["narrow/0"]
    # the wide job's 3 placed tasks finish: 3 unfinished against 4, it goes ahead again
    for index in range(3):
        finish(wide, index)
    assert wide.key == (3, 1) and narrow.key == (4, 2)
    assert place(1) == ["wide/3"]
    # narrow/0 finishes: 3 against 3, by arrival: the wide job
    finish(narrow, 0)
    assert narrow.key == (3, 2)
    assert place(1) == ["wide/4"]
    # wide/3 finishes: 2 left; the wide job's last waiting task, then the narrow job's three
    finish(wide, 3)
    assert place(4) == ["wide/5", "narrow/1", "narrow/2", "narrow/3"]
    assert not backlog


# -- in a GM core ------------------------------------------------------------------------------


def job(job_id: str, width: int, duration: float = 1.0) -> JobSpec:
    tasks = tuple(TaskSpec(f"{job_id}/{i}", job_id, Resources(1000, 1024), frozenset(),
                           duration) for i in range(width))
    return JobSpec(job_id, "u1", tasks, 0.0)


def placed_jobs(fed: Federation) -> list[str]:
    return [log.fields["job"] for _, log in fed.logs if log.event == "task_placed"]


def job_of_attempt(fed: Federation) -> dict[str, str]:
    return {log.fields["attempt"]: log.fields["job"] for _, log in fed.logs
            if log.event == "task_placed"}


def one_node(policy: str) -> Federation:
    """One GM, one LM of one node of 4 cores: 4 one-core tasks at a time."""
    fed = Federation.simple(num_gms=1, num_lms=1, nodes_per_lm=1, job_policy=policy,
                            constraints=frozenset())
    fed.tick()
    fed.run_until_quiet()
    return fed


def free(fed: Federation) -> None:
    """Let the GM see the cores the finished tasks freed, and place on them."""
    fed.run_until_quiet()
    fed.tick(fed.heartbeat_interval)
    fed.run_until_quiet()


def finish_of(fed: Federation, job_id: str, count: int) -> None:
    """Finish `count` running attempts of `job_id`."""
    jobs = job_of_attempt(fed)
    attempts = [attempt for attempt in fed.executing if jobs[attempt] == job_id][:count]
    assert len(attempts) == count
    for attempt in attempts:
        fed.finish(attempt)


def served_behind_a_blocker(policy: str, widths: dict[str, int]) -> list[str]:
    """The node full with a 4-task blocker; these jobs arrive in this order and wait; the
    blocker ends, and the jobs run to the end: the jobs of the tasks placed, in order."""
    fed = one_node(policy)
    fed.submit("gm-1", job("blocker", 4))
    fed.run_until_quiet()
    for job_id, width in widths.items():
        fed.submit("gm-1", job(job_id, width))
    fed.run_until_quiet()
    assert placed_jobs(fed) == ["blocker"] * 4  # nothing else fits yet
    fed.finish_all()
    fed.drain()
    assert {ended.job_id for ended in fed.ended_jobs} == {"blocker", *widths}
    return placed_jobs(fed)[4:]


def test_with_fewest_tasks_jobs_of_5_2_and_3_tasks_are_served_2_3_5() -> None:
    # 4 cores free: both tasks of the 2-task job, 2 of the 3-task one; as those end, the
    # 3-task job's last and 3 of the 5-task job's, then its last 2
    placed = served_behind_a_blocker("fewest-tasks", {"five": 5, "two": 2, "three": 3})
    assert placed == ["two"] * 2 + ["three"] * 3 + ["five"] * 5


def test_with_fifo_the_same_jobs_go_by_arrival() -> None:
    placed = served_behind_a_blocker("fifo", {"five": 5, "two": 2, "three": 3})
    assert placed == ["five"] * 5 + ["two"] * 2 + ["three"] * 3


def test_in_a_gm_equal_counts_go_by_arrival() -> None:
    placed = served_behind_a_blocker("fewest-tasks", {"x": 2, "y": 2, "z": 1})
    assert placed == ["z", "x", "x", "y", "y"]


def run_wide_then_mid(policy: str) -> tuple[Federation, list[str]]:
    """A 5-task job takes the 4 cores (1 task waits); a 3-task job arrives and waits. One
    wide task ends (4 unfinished against 3), then two more (2 against 3)."""
    fed = one_node(policy)
    fed.submit("gm-1", job("wide", 5))
    fed.run_until_quiet()
    assert placed_jobs(fed) == ["wide"] * 4
    fed.submit("gm-1", job("mid", 3))
    fed.run_until_quiet()
    assert placed_jobs(fed) == ["wide"] * 4  # no room
    finish_of(fed, "wide", 1)
    free(fed)
    after_one = placed_jobs(fed)[4:]
    finish_of(fed, "wide", 2)
    free(fed)
    return fed, after_one + placed_jobs(fed)[4 + len(after_one):]


def test_with_fewest_tasks_the_order_changes_as_tasks_finish() -> None:
    fed, placed = run_wide_then_mid("fewest-tasks")
    # 4 left of wide against 3 of mid: mid's first; then 2 left of wide (mid still 3, its
    # task only running): wide's last waiting task, then mid's next
    assert placed == ["mid", "wide", "mid"]
    gm = fed.gms["gm-1"]
    assert gm.jobs["wide"].key == (2, 1) and gm.jobs["mid"].key == (3, 2)
    # mid's placed tasks end: 1 left against wide's 2, with nothing of it waiting any more
    finish_of(fed, "mid", 2)
    fed.run_until_quiet()
    assert gm.jobs["mid"].key == (1, 2)
    fed.drain()
    assert {ended.job_id for ended in fed.ended_jobs} == {"wide", "mid"}


def test_with_fifo_the_wide_job_keeps_its_place() -> None:
    _, placed = run_wide_then_mid("fifo")
    assert placed == ["wide", "mid", "mid"]
