"""A simulation's memory at its peak (issue 38), without changing a figure: the analysis keeps
a row of typed columns per attempt (inspection/attempts.py) instead of an object, its report
takes one column at a time, modules a run never uses are not imported, and a GM's ended jobs
give back what they no longer need.

The report must be the very one the per-attempt records gave, float for float: `OldWay`
below is that analysis (its records and formulas as they were), fed the same events."""

from __future__ import annotations

import contextlib
import gc
import json
import random
import subprocess
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from common.policies.job import NO_PILOTS, FifoPolicy, JobProgress
from inspection.analysis import (
    COMPONENTS,
    PARTS,
    SERIES_POINTS,
    RunAnalysis,
    _axis0_mean,
    _Groups,
    _mean_over_spans,
    _time_weighted_mean,
)
from inspection.attempts import CHUNK, AttemptTable
from loadgen.paper_workloads import YH1_SUB
from megha.cli import COMMANDS, main

ROOT = Path(__file__).resolve().parents[2]


# --- the analysis as it was: an object per attempt ------------------------------------------


@dataclass(slots=True)
class _OldAttempt:
    task: str = ""
    placed: float | None = None
    placed_h: float = 0.0
    launched: float | None = None
    launched_h: float = 0.0
    received: float | None = None
    received_h: float = 0.0
    placed_stamps: tuple | None = None
    launched_stamps: tuple | None = None
    received_stamps: tuple | None = None
    started: float | None = None
    cpu_m: int = 0
    user: str = ""
    lm_start: float | None = None
    lm_end: float | None = None
    queued: bool = False
    copy_of: str | None = None
    own_work: float | None = None
    finished: bool = False


def _old_stamps(e: dict):
    if "work_s" not in e:
        return None
    return float(e["wait_s"]), float(e["flight_s"]), float(e["work_s"])


class OldWay:
    """The attempts' part of the analysis before its table; the rest (jobs, shares, races)
    is the new analysis's, which this change left alone."""

    def __init__(self, events: list[dict]) -> None:
        self.run = RunAnalysis("x")
        self.attempts: dict[str, _OldAttempt] = defaultdict(_OldAttempt)
        for e in events:
            self.run.feed(e)
            with contextlib.suppress(KeyError, TypeError, ValueError):  # as `feed`
                self._feed(e)

    def _feed(self, e: dict) -> None:  # the old handlers of attempt lines, one branch each
        kind, attempts = e["event"], self.attempts
        if kind == "task_placed":
            attempt = attempts[e["attempt"]]
            attempt.task = e["task"]
            attempt.placed, attempt.placed_h = e["ts"], float(e.get("handle_s", 0.0))
            attempt.placed_stamps = _old_stamps(e)
        elif kind == "task_launched":
            attempt = attempts[e["attempt"]]
            attempt.task = e["task"]
            attempt.launched, attempt.launched_h = e["ts"], float(e.get("handle_s", 0.0))
            attempt.launched_stamps = _old_stamps(e)
            attempt.cpu_m, attempt.user = int(e.get("cpu_m", 0)), e["user"]
            if e.get("queued"):
                attempt.queued = True
                attempt.lm_start = attempt.started
            else:
                attempt.lm_start = e["ts"]
        elif kind == "task_queued":
            attempt = attempts[e["attempt"]]
            if attempt.received is None or e["ts"] < attempt.received:
                attempt.received, attempt.received_h = e["ts"], float(e.get("handle_s", 0.0))
                attempt.received_stamps = _old_stamps(e)
        elif kind == "task_started":
            if e.get("resumed"):
                return
            attempt = attempts[e["attempt"]]
            if attempt.queued:
                attempt.lm_start = e["ts"]
            attempt.task = e["task"]
            attempt.started = e["ts"]
            if attempt.received is None:
                attempt.received, attempt.received_h = e["ts"], float(e.get("handle_s", 0.0))
                attempt.received_stamps = _old_stamps(e)
            if e.get("copy_of") is not None:
                attempt.copy_of = e["copy_of"]
        elif kind in ("task_finished", "task_failed", "task_lost", "task_preempted",
                      "task_cancelled"):
            if "worker" in e:
                if e.get("own_work") is not None:
                    attempt = attempts[e["attempt"]]
                    attempt.own_work = float(e["own_work"])
                    attempt.finished = kind == "task_finished"
                return
            attempts[e["attempt"]].lm_end = e["ts"]
        elif kind in ("copy_launched", "copy_cancelled"):
            attempt_id, original = e["attempt"], e["original"]
            attempts[attempt_id].copy_of = original
        elif kind == "copy_finished_late" and e.get("original") is not None:
            attempts[e["attempt"]].copy_of = e["original"]

    def first_starts(self) -> dict[str, _OldAttempt]:
        first: dict[str, _OldAttempt] = {}
        for attempt in self.attempts.values():
            if attempt.started is None or not attempt.task:
                continue
            known = first.get(attempt.task)
            if known is None or attempt.started < known.started:
                first[attempt.task] = attempt
        return first

    def first_decisions(self) -> dict[str, tuple[float, float]]:
        first: dict[str, tuple[float, float]] = {}
        for attempt in self.attempts.values():
            if attempt.placed is None or not attempt.task:
                continue
            start = attempt.placed - attempt.placed_h
            known = first.get(attempt.task)
            if known is None or start < known[0]:
                stamps = attempt.placed_stamps
                first[attempt.task] = (start, stamps[0] if stamps else 0.0)
        return first

    def allocation_and_breakdown(self) -> tuple[dict, dict]:
        groups, parts, components, incomplete = _Groups(), [], [], 0
        decisions = self.first_decisions()
        for task, attempt in self.first_starts().items():
            job = self.run.jobs.get(task.rpartition("/")[0])
            if job is None or job.arrival is None:
                incomplete += 1
                continue
            groups.add(job, attempt.started - job.arrival)
            if None in (attempt.placed, attempt.launched, attempt.received):
                incomplete += 1
                continue
            gm_in = attempt.placed - attempt.placed_h
            lm_in = attempt.launched - attempt.launched_h
            worker_in = attempt.received - attempt.received_h
            parts.append((gm_in - job.arrival,
                          attempt.placed_h + attempt.launched_h + attempt.received_h,
                          (lm_in - attempt.placed) + (worker_in - attempt.launched),
                          attempt.started - attempt.received))
            components.append(_old_components(attempt, job.arrival, *decisions[task]))
        if not parts:
            return groups.figures(), {"tasks": 0, "incomplete": incomplete}
        return groups.figures(), ({"tasks": len(parts), "incomplete": incomplete}
                                  | _old_shares(parts, PARTS)
                                  | {"components": _old_shares(components, COMPONENTS)})

    def fairness(self) -> dict:
        run = self.run
        capacity = sum(run.capacity.values())
        changes = []
        for attempt in self.attempts.values():
            if attempt.lm_start is None or not attempt.cpu_m:
                continue
            changes.append((attempt.lm_start, attempt.user, attempt.cpu_m))
            if attempt.lm_end is not None:
                changes.append((attempt.lm_end, attempt.user, -attempt.cpu_m))
        result = {"capacity_cpu_m": capacity, "configured": dict(sorted(run.shares.items()))}
        if not changes or capacity <= 0:
            return result | {"mean_share": {}, "series": {"t": [], "users": {}}}
        changes.sort()
        by_user = {user: ([], []) for user in run.shares}
        for t, user, d in changes:
            times, deltas = by_user.setdefault(user, ([], []))
            times.append(t)
            deltas.append(d)
        start, end = changes[0][0], changes[-1][0]
        grid = np.linspace(start, end, SERIES_POINTS) if end > start else np.array([start])
        series, mean, active = {}, {}, {}
        spans = self.waiting_spans(end)
        for user in sorted(by_user):
            times = np.array(by_user[user][0] or [start])
            steps = np.cumsum(by_user[user][1] or [0])
            index = np.searchsorted(times, grid, side="right")
            held = np.where(index > 0, steps[np.maximum(index - 1, 0)], 0)
            series[user] = (held / capacity).round(4).tolist()
            mean[user] = _time_weighted_mean(times, steps, start, end) / capacity
            if spans.get(user):
                active[user] = _mean_over_spans(times, steps, spans[user]) / capacity
        return result | {"mean_share": mean, "waiting_share": active,
                         "series": {"t": (grid - start).round(3).tolist(), "users": series}}

    def waiting_spans(self, end: float) -> dict:
        last_start, started = {}, Counter()
        for task, attempt in self.first_starts().items():
            job_id = task.rpartition("/")[0]
            started[job_id] += 1
            last_start[job_id] = max(last_start.get(job_id, attempt.started), attempt.started)
        by_user: dict = {}
        for job_id, job in self.run.jobs.items():
            if job.arrival is not None:
                until = last_start.get(job_id, end) if started[job_id] >= job.tasks else end
                by_user.setdefault(job.user, []).append((job.arrival, until))
        spans = {}
        for user, intervals in by_user.items():
            merged: list[list[float]] = []
            for a, b in sorted(intervals):
                if merged and a <= merged[-1][1]:
                    merged[-1][1] = max(merged[-1][1], b)
                else:
                    merged.append([a, b])
            spans[user] = [(a, b) for a, b in merged if b > a]
        return spans

    def work_by_outcome(self) -> tuple[float, float, float]:
        beaten = self.run.races.beaten
        winners = set(beaten.values())
        useful = wasted_copies = wasted_originals = 0.0
        for attempt_id, attempt in self.attempts.items():
            if attempt.own_work is None:
                continue
            if attempt.copy_of is not None and attempt_id not in winners:
                wasted_copies += attempt.own_work
            elif attempt_id in beaten:
                wasted_originals += attempt.own_work
            elif attempt.finished:
                useful += attempt.own_work
        return useful, wasted_copies, wasted_originals

    def report(self) -> dict:
        """The sections the attempts make, as the old analysis computed them."""
        allocation, breakdown = self.allocation_and_breakdown()
        sections = {"allocation": allocation, "breakdown": breakdown,
                    "tasks_started": len(self.first_starts()), "fairness": self.fairness()}
        if self.run._had_copies():
            useful, copies, originals = self.work_by_outcome()
            sections["work"] = {"useful_work": useful, "wasted_work": copies + originals,
                                "wasted_work_by": {"copies": copies, "originals": originals}}
            sections["tasks_with_copies"] = len({a.copy_of for a in self.attempts.values()
                                                 if a.copy_of is not None})
        return sections


def _old_components(attempt: _OldAttempt, arrival: float, first_start: float,
                    first_wait: float) -> tuple[float, ...]:
    _, _, gm_work = attempt.placed_stamps or (0.0, 0.0, attempt.placed_h)
    _, lm_flight, lm_work = attempt.launched_stamps or (0.0, None, attempt.launched_h)
    _, worker_flight, worker_work = attempt.received_stamps or (0.0, None, attempt.received_h)
    decided = attempt.placed - attempt.placed_h
    hops = ((attempt.launched - attempt.launched_h) - attempt.placed
            + (attempt.received - attempt.received_h) - attempt.launched)
    flights = hops if lm_flight is None or worker_flight is None else lm_flight + worker_flight
    own_work = gm_work + lm_work + worker_work
    steps = attempt.placed_h + attempt.launched_h + attempt.received_h
    return (flights, gm_work, lm_work, worker_work, first_wait + (hops - flights),
            steps - own_work, decided - first_start, first_start - first_wait - arrival,
            attempt.started - attempt.received)


def _old_shares(rows: list[tuple[float, ...]], names: tuple[str, ...]) -> dict:
    array = np.asarray(rows)
    means = array.mean(axis=0)
    total = means.sum()
    return {"mean_s": dict(zip(names, means.tolist(), strict=True)),
            "p50_s": dict(zip(names, np.percentile(array, 50, axis=0).tolist(), strict=True)),
            "share": dict(zip(names, (means / total if total > 0 else means * 0).tolist(),
                              strict=True))}


def _new_sections(report: dict) -> dict:
    sections = {"allocation": report["allocation"], "breakdown": report["breakdown"],
                "tasks_started": report["counts"]["tasks_started"],
                "fairness": report["fairness"]}
    if "redundancy" in report:
        redundancy = report["redundancy"]
        sections["work"] = {key: redundancy[key]
                            for key in ("useful_work", "wasted_work", "wasted_work_by")}
        sections["tasks_with_copies"] = redundancy["tasks_with_copies"]
    return sections


def assert_as_before(events: list[dict]) -> dict:
    """The new report's attempt sections are the old analysis's, to the last bit (and in
    the same key order); returns the new report."""
    new = RunAnalysis("x")
    for e in events:
        new.feed(e)
    report = new.report()
    old = OldWay(events).report()
    assert json.dumps(_new_sections(report)) == json.dumps(old)
    return report


# --- event logs ---------------------------------------------------------------------------


def simulate(path: Path, *extra: str) -> list[dict]:
    done = subprocess.run(
        [sys.executable, "-m", "megha", "simulate", "--nodes", "40", "--gms", "3", "--lms", "2",
         "--nodes-per-worker", "10", "--slots", "--trace", str(YH1_SUB), "--jobs", "30",
         "--duration-scale", "0.01", "--log", str(path), *extra],
        capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def logs(tmp_path_factory) -> dict[str, list[dict]]:
    where = tmp_path_factory.mktemp("logs")
    return {
        # processing stamps, local queues, refused launches, preemptions, slearn's pilots
        "processing": simulate(where / "p.log", "--processing", "model", "--queue-depth", "2",
                               "--job-policy", "slearn"),
        # redundant copies, checkpoints, machine variability
        "copies": simulate(where / "c.log", "--redundancy", "srpt+r",
                           "--variability", "two-state"),
    }


def test_the_logs_exercise_every_branch_of_the_attempt_figures(logs) -> None:
    processing, copies = logs["processing"], logs["copies"]
    placed = Counter(e["task"] for e in processing if e["event"] == "task_placed")
    assert any(count > 1 for count in placed.values())  # tasks whose first try was refused
    assert any("work_s" in e for e in processing)
    assert any(e["event"] == "task_launched" and e.get("queued") for e in processing)
    assert any(e["event"] == "task_queued" for e in processing)
    assert any(e["event"] == "copy_launched" for e in copies)
    assert any(e["event"] == "copy_won" and e["by_copy"] for e in copies)


@pytest.mark.parametrize("name", ["processing", "copies"])
def test_the_report_is_the_one_the_per_attempt_records_gave(logs, name) -> None:
    report = assert_as_before(logs[name])
    assert report["breakdown"]["tasks"] > 100 and report["fairness"]["series"]["users"]


@pytest.mark.parametrize("name", ["processing", "copies"])
def test_in_any_order_of_events_too(logs, name) -> None:
    events = list(logs[name])
    random.Random(7).shuffle(events)
    assert_as_before(events)


def test_and_with_lines_missing_or_odd() -> None:
    """Cut logs, attempts seen before their task, copies named then unnamed, equal starts."""
    def line(ts, event, attempt=None, **fields):
        e = {"ts": ts, "svc": "x", "event": event} | fields
        return e | ({"attempt": attempt} if attempt else {})

    events = [
        line(0.0, "gm_starting", shares={"q1": 0.5, "q2": 0.5, "q3": 0.0}),
        line(0.0, "lm_started", lm="lm-1", cpu_m=4000),
        line(0.0, "job_arrived", job="j", user="q1", tasks=3, arrival=0.0),
        line(0.5, "job_arrived", job="k", user="q2", tasks=1, arrival=0.5),
        # j/0: refused once, placed again; the second attempt starts
        line(1.0, "task_placed", "j/0#0.1", task="j/0", handle_s=0.25),
        line(1.5, "task_placed", "j/0#0.2", task="j/0", handle_s=0.0),
        line(1.7, "task_launched", "j/0#0.2", task="j/0", user="q1", cpu_m=1000),
        line(1.9, "task_started", "j/0#0.2", task="j/0", job="j"),
        line(4.0, "task_finished", "j/0#0.2"),
        # j/1: two attempts start at the same time; only the LM saw the second
        line(2.0, "task_placed", "j/1#0.1", task="j/1"),
        line(2.1, "task_launched", "j/1#0.1", task="j/1", user="q1", cpu_m=1000,
             queued=True),
        line(2.2, "task_queued", "j/1#0.1", task="j/1"),
        line(2.6, "task_started", "j/1#0.1", task="j/1", job="j"),
        line(2.6, "task_started", "j/1#0.3", task="j/1", job="j", copy_of="j/1#0.1"),
        line(2.7, "copy_launched", "j/1#0.3", original=None),
        line(3.0, "task_finished", "j/1#0.1", worker="w", own_work=0.4),
        # j/2: started with no placed line (a log cut short)
        line(3.1, "task_started", "j/2#0.1", task="j/2", job="j"),
        # k/0: its job arrived, no launch line
        line(1.0, "task_placed", "k/0#0.1", task="k/0"),
        line(1.2, "task_started", "k/0#0.1", task="k/0", job="k"),
        # m/0: two attempts decided in steps that started together; the first one's wait
        # is the task's
        line(0.0, "job_arrived", job="m", user="q2", tasks=1, arrival=0.0),
        line(1.0, "task_placed", "m/0#0.1", task="m/0", handle_s=0.5, wait_s=0.1,
             flight_s=0.0, work_s=0.2),
        line(1.25, "task_placed", "m/0#0.2", task="m/0", handle_s=0.75, wait_s=0.3,
             flight_s=0.0, work_s=0.2),
        line(1.5, "task_launched", "m/0#0.2", task="m/0", user="q2", cpu_m=500),
        line(1.75, "task_started", "m/0#0.2", task="m/0", job="m"),
        # z/0: a job never seen arriving
        line(5.0, "task_started", "z/0#0.1", task="z/0", job="z"),
        line(6.0, "task_lost", "z/0#0.1"),
        line(6.0, "job_done", job="j", user="q1", tasks=3, arrival=0.0),
    ]
    report = assert_as_before(events)
    assert report["breakdown"]["incomplete"] == 3 and report["breakdown"]["tasks"] == 3
    for order in range(5):
        shuffled = list(events)
        random.Random(order).shuffle(shuffled)
        assert_as_before(shuffled)


def test_an_empty_run_reports_as_before() -> None:
    assert_as_before([])
    assert_as_before([{"ts": 0.0, "svc": "gm-1", "event": "gm_starting",
                       "shares": {"q1": 1.0}}])


# --- the table ------------------------------------------------------------------------------


def placed_and_started(attempts: int, first: int = 0) -> list[dict]:
    """Lines of `attempts` tasks of job j, each placed, launched, started and ended."""
    events = [] if first else [
        {"ts": 0.0, "svc": "gm-1", "event": "gm_starting", "shares": {"q1": 1.0}},
        {"ts": 0.0, "svc": "lm-1", "event": "lm_started", "lm": "lm-1", "cpu_m": 10_000},
        {"ts": 0.0, "svc": "gm-1", "event": "job_arrived", "job": "j", "user": "q1",
         "tasks": 100_000, "arrival": 0.0}]
    for n in range(first, first + attempts):
        task, attempt = f"j/{n}", f"j/{n}#0.1"
        events += [{"ts": float(n), "svc": "gm-1", "event": "task_placed", "attempt": attempt,
                    "task": task, "handle_s": 0.0},
                   {"ts": n + 0.25, "svc": "lm-1", "event": "task_launched",
                    "attempt": attempt, "task": task, "user": "q1", "cpu_m": 1000},
                   {"ts": n + 0.5, "svc": "w", "event": "task_started", "attempt": attempt,
                    "task": task, "job": "j"},
                   {"ts": n + 2.0, "svc": "lm-1", "event": "task_finished",
                    "attempt": attempt}]
    return events


def test_the_analysis_keeps_no_object_per_attempt() -> None:
    run = RunAnalysis("x")
    events = placed_and_started(20_000)
    gc.collect()
    before = len(gc.get_objects())
    for e in events:
        run.feed(e)
    gc.collect()
    # the per-attempt records took 20,000 objects the collector tracks; the columns none
    assert len(gc.get_objects()) - before < 100
    assert len(run.attempts) == 20_000


def test_a_fed_table_can_be_fed_again_after_its_report() -> None:
    """No view of the table's columns outlives the report: a column held by one could not
    grow (BufferError) when the next attempt arrives."""
    run = RunAnalysis("x")
    for e in placed_and_started(CHUNK):  # every row of the first chunk taken
        run.feed(e)
    assert run.attempts.capacity == CHUNK
    first = run.report()
    assert first["breakdown"]["tasks"] == CHUNK and first["fairness"]["mean_share"]["q1"] > 0
    for e in placed_and_started(3, first=CHUNK):
        run.feed(e)
    assert run.attempts.capacity == 2 * CHUNK
    assert run.report()["counts"]["tasks_started"] == first["counts"]["tasks_started"] + 3


def test_the_table_reads_as_the_old_records() -> None:
    table = AttemptTable()
    assert len(table) == 0 and dict(table) == {}
    row = table.row("a#0.1")
    assert table.row("a#0.1") == row == 0 and table.row("b#0.1") == 1
    table.placed[row], table.task[row] = 2.5, "a"
    table.set_stamps(row, "launched", (0.1, 0.2, 0.3))
    view = table["a#0.1"]
    assert (view.task, view.placed, view.started, view.placed_h, view.cpu_m) == (
        "a", 2.5, None, 0.0, 0)
    assert view.launched_stamps == (0.1, 0.2, 0.3) and view.placed_stamps is None
    assert not view.queued and view.copy_of is None
    table.set_stamps(row, "launched", None)  # a later line without them
    assert view.launched_stamps is None
    assert [v.task for v in table.values()] == ["a", ""]
    with pytest.raises(KeyError):
        table["c#0.1"]


def test_first_starts_still_gives_records() -> None:
    run = RunAnalysis("x")
    for e in placed_and_started(3):
        run.feed(e)
    assert {task: a.started for task, a in run._first_starts().items()} == {
        "j/0": 0.5, "j/1": 1.5, "j/2": 2.5}


# --- imports ------------------------------------------------------------------------------


IMPORTS = """
import sys
import megha.cli
import simulator.eventlog


def loaded():
    return sorted(name for name in ("numpy", "rich") if name in sys.modules)


report = simulator.eventlog.SimLog.report
at_report = []


def reported(log):
    at_report.append(loaded())
    return report(log)


simulator.eventlog.SimLog.report = reported
status = megha.cli.main(sys.argv[1:])
print(at_report, loaded(), status)
"""


def test_a_simulation_imports_rich_never_and_numpy_for_its_report_only(tmp_path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", IMPORTS, "simulate", "--nodes", "20", "--gms", "1", "--lms",
         "2", "--slots", "--trace", str(YH1_SUB), "--jobs", "5", "--no-log"],
        capture_output=True, text=True, cwd=ROOT, timeout=120)  # stderr: no terminal
    assert done.returncode == 0, done.stderr
    # neither when the report starts; numpy after it
    assert done.stdout.splitlines()[-1] == "[[]] ['numpy'] 0"


def test_the_analysis_and_the_workload_tools_import_neither() -> None:
    code = ("import sys, inspection.analysis, loadgen.progress, loadgen.sources; "
            "print(sorted(m for m in ('numpy', 'rich') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_still_has_its_help(capsys, command) -> None:
    with pytest.raises(SystemExit) as exit_:
        main([command, "--help"])
    assert exit_.value.code == 0
    assert f"usage: megha {command}" in capsys.readouterr().out


def test_the_entry_point_lists_every_command() -> None:
    done = subprocess.run([sys.executable, "-m", "megha", "--help"], capture_output=True,
                          text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 0, done.stderr
    assert all(command in done.stdout for command in COMMANDS)


# --- ended jobs ---------------------------------------------------------------------------


def test_a_jobs_running_tasks_give_back_their_table_once_none_runs() -> None:
    job = JobProgress(num_tasks=600, seq=1, arrival=0.0, trace_estimate=None)
    empty = sys.getsizeof({})
    for index in range(600):
        job.ran(index, float(index))
    grown = job.running
    assert sys.getsizeof(grown) > 10 * empty
    for index in range(599):
        job.ran(index, None)
    assert job.running is grown and list(job.running.items()) == [(599, 599.0)]
    job.ran(599, None)
    assert job.running == {} and sys.getsizeof(job.running) == empty
    job.ran(3, 7.0)  # a task running again (a preempted one resumed) counts as before
    assert job.running == {3: 7.0}


def test_jobs_without_pilots_share_one_empty_set() -> None:
    jobs = [JobProgress(num_tasks=1, seq=n, arrival=0.0, trace_estimate=None)
            for n in range(3)]
    for job in jobs:
        FifoPolicy().admit(job, random.Random(0))
    assert all(job.pilots is NO_PILOTS for job in jobs) and not NO_PILOTS


def test_the_sequential_mean_is_numpys_along_axis_0() -> None:
    """The breakdown's means, a column at a time, are numpy's over a row per task (a running
    sum): if numpy ever sums those otherwise, this says so before a report changes."""
    rng = np.random.default_rng(5)
    for size in (1, 7, 9, CHUNK - 1, CHUNK + 1, 3 * CHUNK + 5):
        rows = rng.exponential(1.0, (size, len(COMPONENTS))) * 10.0 ** rng.uniform(-4, 4)
        mine = [_axis0_mean(np.ascontiguousarray(rows[:, i])) for i in range(rows.shape[1])]
        assert mine == rows.mean(axis=0).tolist()
