"""One run's events in, its figures out: allocation time and its parts, JCT and slowdown,
counts, and each user queue's share of the cluster over time.

Events arrive in any order (one service's file after another, or `docker compose logs`), so
every figure is joined by id at the end: `feed` keeps a few numbers per job and per attempt,
never the events.

Allocation time of a task = its first start on a worker - its job's arrival at the GM
(docs/architecture.md, The event log). For the attempt that started, the log gives, each
stamped after the core returned and with `handle_s`, the core's time on the event
(services/runtime.py):

    arrival A      the job's `arrival` (GM clock)
    placed  P, g   task_placed at the GM
    launched L, l  task_launched at the LM
    received W, w  task_queued at the worker, else task_started
    started S      task_started at the worker

and the allocation time S - A splits exactly into

    framework queuing  (P - g) - A     waiting at the GM, including earlier refused attempts
    processing         g + l + w       the GM's, LM's and worker's decisions
    communication      (L - l) - P  +  (W - w) - L   messages in flight and waiting to be read
    worker queuing     S - W           waiting in the node's local queue

as in the Megha paper's section III. A task whose attempt lacks one of these events (a log
cut short) still counts in the allocation figures, and in `breakdown.incomplete`.

The paper's Figure 7 splits it further (`breakdown.components`), with what a simulation with
processing time adds to those lines (simulator/federated.py): `wait_s`, the time the event
behind the line waited in its service's inbox, `flight_s`, its time on the network, and
`work_s`, the part of `handle_s` that was this task's own work (the rest of the step worked
for other tasks: a GM places a whole job in one step, and nothing leaves before it ends).
With p1 = the start of the step that placed the task's first attempt, w1 its event's wait,
pn = the start of the step that placed the attempt that started, and f the two flights:

    waiting for resources  (p1 - w1) - A   no fitting node in the view yet (cluster full,
                                           freed nodes not yet reported), or held
    inconsistency retries  pn - p1         time lost to refused attempts (stale views)
    processing at GM/LM/worker  work_s of the three lines
    communication          f(GM->LM) + f(LM->worker)
    framework queuing      w1, and the waits in the LM's and worker's inboxes and for the
                           GM's request window: waiting behind other events and requests
    batch wait             the steps' work for the other tasks of the task's own step: a
                           GM places a whole job in one step, an LM validates a request's
                           batch, and nothing of it leaves before the step ends
    worker queuing         S - W

The paper's framework queuing is a task's wait in the framework's queue for processing: our
framework queuing plus the part of the batch wait spent on the decisions made before the
task's own; the part after it is held only because a step's commands leave when it ends.
Kept apart, the two say different things: framework queuing grows with load, batch wait
with the width of jobs.

Lines without these fields (the services') count their whole `handle_s` as processing,
inbox waits as communication and no framework queuing but the GM's, which there is in
waiting for resources: the four-part split above is the services' exact one.

Weighted JCT: `job_arrived` carries the job's `weight` (`JobSpec.weight`; a line without it
reads as 1), and `jct.weighted_mean` is the sum of weight x JCT over the sum of weights of the
jobs done, the figure Smith's rule (the `wspt` job policy) lowers; `jct.weighted` says whether
some job done weighs other than 1 (else it equals the mean, and the reports leave it out).

Job-size estimation (job policies with priority queues: slearn, las, 3sigma, ...): their
`job_done` carries `predictor`, `estimate` (task-seconds, or null), `work` (the measured
task-seconds), `level` and `true_level` (priority queue indices, 0 the highest) and `thin`;
`job_arrived` carries slearn's `sampling_ratio`, and `job_estimated` is logged when an estimate
becomes known. From these the `estimation` section (only when some job_done has a
`predictor`): how far estimates are from the work (estimate / work), how often a wide job sat
in its true queue, JCT by thin/wide x short/long (long: `true_level` >= 1), and the
sampling ratios slearn chose. A log without these fields pays one dict lookup per job event.

Redundant copies (docs/redundancy.md): an LM logs `copy_launched`, `copy_cancelled` (with its
`why`), `copy_won` (one per task with copies that finished: the winner, `by_copy`, the task's
`checkpoints`) and `copy_finished_late`; workers log `task_checkpointed` (a checkpoint's
answer), `task_restored`, a copy's `task_started` with `copy_of`, and `own_work` (the work the
attempt's own runs did) on `task_finished` and `task_cancelled`. From these the `redundancy`
section (only when the log has a `copy_launched` or `copy_won`): copies launched and cancelled
by reason, wins by copies and by originals, checkpoints per task, and the work wasted by the
attempts that lost their race (every copy but a winner, and the originals a copy beat) next to
the useful work (the `own_work` of the other finished attempts).

Memory: a simulation feeds its events as it runs, so what `feed` keeps is part of the run's
peak: a row of typed columns per attempt (inspection/attempts.py), no object. The report
comes after the run, and keeps no per-task tuple: each figure of the breakdown is a column of
a value per task, made and summed one after the other (numpy, imported by the report only: a
run's memory starts with its imports).
"""

from __future__ import annotations

import math
from array import array
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from inspection.attempts import FINISHED, QUEUED, STAMPED, AttemptTable, AttemptView

if TYPE_CHECKING:
    import numpy as np

PARTS = ("framework_queuing", "processing", "communication", "worker_queuing")
# the Megha paper's Figure 7 components (`breakdown.components`), finer than PARTS
COMPONENTS = ("communication", "processing_gm", "processing_lm", "processing_worker",
              "framework_queuing", "batch_wait", "inconsistency_retries",
              "waiting_for_resources", "worker_queuing")
# Job-size classes by task count (ours: the paper reports short and long jobs by trace).
SIZE_CLASSES = ((1, "1 task"), (10, "2-10 tasks"), (100, "11-100 tasks"),
                (math.inf, "over 100 tasks"))
LM_ENDS = ("task_finished", "task_failed", "task_lost", "task_preempted", "task_cancelled")
SERIES_POINTS = 200  # samples of the share-over-time series
CDF_POINTS = 500  # quantiles kept of a distribution, for plots (the report has no raw values)
ERROR_CDF_POINTS = 100  # quantiles kept of estimate / work
RATIO_POINTS = 2000  # (time, sampling ratio) pairs kept at most
JCT_BINS = ("thin_short", "thin_long", "wide_short", "wide_long")


def size_class(tasks: int) -> str:
    return next(name for bound, name in SIZE_CLASSES if tasks <= bound)


def summary(values) -> dict:
    """count, mean and the percentiles the reports show, in the values' unit."""
    import numpy as np

    array = np.asarray(values, dtype=float)
    if array.size == 0:
        return {"count": 0}
    # p99.99: the Megha paper's tail figures go that far (its Figures 3 and 4)
    p50, p90, p99, p999, p9999 = np.percentile(array, [50, 90, 99, 99.9, 99.99])
    return {"count": int(array.size), "mean": float(array.mean()), "p50": float(p50),
            "p90": float(p90), "p99": float(p99), "p99.9": float(p999),
            "p99.99": float(p9999), "max": float(array.max())}


def _cdf(values, points: int = CDF_POINTS) -> dict:
    """The empirical CDF as at most `points` (x, y) pairs: every value when there are few,
    else evenly spaced quantiles, so a plot of millions of tasks stays a small report."""
    import numpy as np

    array = np.sort(np.asarray(values, dtype=float))
    if array.size <= points:
        x, y = array, np.arange(1, array.size + 1) / max(array.size, 1)
    else:
        y = np.linspace(0.0, 1.0, points)
        x = np.quantile(array, y)
    return {"x": x.round(6).tolist(), "y": y.round(4).tolist()}


class _Groups:
    """One figure's values overall, per user queue and per job-size class."""

    def __init__(self) -> None:
        self.overall = array("d")
        self.by_user: dict[str, array] = defaultdict(lambda: array("d"))
        self.by_size: dict[str, array] = defaultdict(lambda: array("d"))

    def add(self, job: _Job, value: float) -> None:
        self.overall.append(value)
        self.by_user[job.user].append(value)
        self.by_size[size_class(job.tasks)].append(value)

    def figures(self) -> dict:
        return {"overall": summary(self.overall), "cdf": _cdf(self.overall),
                "by_user": {u: summary(v) for u, v in sorted(self.by_user.items())},
                "by_size": {name: summary(self.by_size[name]) for _, name in SIZE_CLASSES
                            if self.by_size.get(name)}}


@dataclass(slots=True)
class _Job:
    user: str = ""
    arrival: float | None = None
    tasks: int = 0
    done: float | None = None
    failed: bool = False
    longest_task: float = 0.0
    weight: float = 1.0  # its job_arrived's `weight`; a log from before weights: 1


@dataclass(slots=True)
class _Estimated:
    """What a job_done with a `predictor` says of the job's size and queue."""
    predictor: str
    estimate: float | None
    work: float
    level: int | None
    true_level: int | None
    thin: bool


@dataclass(slots=True)
class _Races:
    """The LMs' word on tasks with copies (the rest is per attempt, in `attempts`)."""
    cancelled: Counter = field(default_factory=Counter)  # copy_cancelled by `why`
    beaten: dict[str, str] = field(default_factory=dict)  # original -> the copy that won
    wins_by_original: int = 0
    checkpoints: list[int] = field(default_factory=list)  # each copy_won's


@dataclass(slots=True)
class _Starts:
    """What the queues' waiting spans need of the tasks' first starts, per job: how many of
    its tasks started, and the last first start."""
    tasks: int  # tasks started
    started: Counter = field(default_factory=Counter)
    last: dict[str, float] = field(default_factory=dict)

    def add(self, job_id: str, when: float) -> None:
        self.started[job_id] += 1
        self.last[job_id] = max(self.last.get(job_id, when), when)


@dataclass(slots=True)
class RunAnalysis:
    name: str
    jobs: dict[str, _Job] = field(default_factory=lambda: defaultdict(_Job))
    attempts: AttemptTable = field(default_factory=AttemptTable)
    counts: Counter = field(default_factory=Counter)
    refusals: Counter = field(default_factory=Counter)
    requeues: Counter = field(default_factory=Counter)
    shares: dict[str, float] = field(default_factory=dict)
    policies: dict[str, str] = field(default_factory=dict)
    capacity: dict[str, int] = field(default_factory=dict)  # LM -> cpu_m
    estimated: dict[str, _Estimated] = field(default_factory=dict)  # job -> its job_done's
    first_estimates: dict[str, tuple[float, float | None, str]] = field(
        default_factory=dict)  # job -> (ts, estimate, predictor) of its first job_estimated
    sampling: dict[str, float] = field(default_factory=dict)  # job -> slearn's sampling ratio
    # node speed variability: each varied run's wall time over its nominal duration
    run_ratios: list[float] = field(default_factory=list)
    races: _Races = field(default_factory=_Races)

    def feed(self, event: dict) -> None:
        handler = _HANDLERS.get(event["event"])
        if handler is not None:
            try:
                handler(self, event)
            except (KeyError, TypeError, ValueError, OverflowError):  # (a number too big)
                self.counts["events_missing_fields"] += 1

    # -- the figures -------------------------------------------------------------------------

    def report(self) -> dict:
        allocation, breakdown, starts = self._allocations()
        jct, counts = self._jct(), self._counts(starts.tasks)
        fairness = self._fairness(starts)
        return {
            "name": self.name,
            "policies": self.policies,
            "allocation": allocation,
            "breakdown": breakdown,
            "jct": jct,
            "counts": counts,
            "fairness": fairness,
        } | ({"estimation": self._estimation()} if self.estimated else {}) | (
            {"variability": summary(self.run_ratios)} if self.run_ratios else {}) | (
            {"redundancy": self._redundancy()} if self._had_copies() else {})

    def _first_rows(self) -> dict[str, int]:
        """task -> the row of its attempt that started first (of equal starts, the attempt
        seen first), the tasks in the order their first started attempt was seen."""
        table = self.attempts
        started, tasks = table.started, table.task
        first: dict[str, int] = {}
        for row in table.ids.values():  # the rows' own ints: no new object per task
            when = started[row]
            if when != when:  # NaN: not started
                continue
            task = tasks[row]
            if not task:
                continue
            known = first.get(task)
            if known is None or when < started[known]:
                first[task] = row
        return first

    def _first_starts(self) -> dict[str, AttemptView]:
        """task -> its attempt that started first, as a record (experiments and tests)."""
        return {task: self.attempts.view(row) for task, row in self._first_rows().items()}

    def _other_placings(self, first: dict[str, int]) -> dict[str, list[int]]:
        """task -> the rows of its placed attempts, for the few tasks with a placed attempt
        other than their first start's (a refused launch, a lost node): the others' first
        decision is their first start's own."""
        table = self.attempts
        placed, tasks = table.placed, table.task
        others: dict[str, list[int]] = {}
        for row in table.ids.values():
            when = placed[row]
            if when != when:
                continue
            task = tasks[row]
            own = first.get(task)
            if own is not None and own != row:
                others.setdefault(task, []).append(row)
        for task, rows in others.items():
            own = first[task]
            if placed[own] == placed[own]:
                rows.append(own)
        return others

    def _first_decision(self, rows: list[int]) -> int:
        """Of a task's placed attempts, the one whose placing step started first (of equal
        starts, the attempt seen first)."""
        placed, handle = self.attempts.placed, self.attempts.placed_h
        return min(rows, key=lambda row: (placed[row] - handle[row], row))

    def _allocations(self) -> tuple[dict, dict, _Starts]:
        """The allocation figures over each task's first start, their breakdown over those
        whose attempt has every line, and what the queues' waiting spans need of the
        starts."""
        table, groups, incomplete = self.attempts, _Groups(), 0
        started, placed, launched, received = (table.started, table.placed, table.launched,
                                               table.received)
        first = self._first_rows()
        others = self._other_placings(first)
        starts = _Starts(len(first))
        # the complete tasks: their first start's row, their job's arrival, their first
        # decision's row
        rows, arrivals, decided = array("q"), array("d"), array("q")
        for task, row in first.items():
            when = started[row]
            job_id = task.rpartition("/")[0]
            starts.add(job_id, when)
            job = self.jobs.get(job_id)
            if job is None or job.arrival is None:
                incomplete += 1
                continue
            groups.add(job, when - job.arrival)
            gm, lm, worker = placed[row], launched[row], received[row]
            if gm != gm or lm != lm or worker != worker:  # NaN: a line missing
                incomplete += 1
                continue
            rows.append(row)
            arrivals.append(job.arrival)
            decided.append(row if task not in others else self._first_decision(others[task]))
        del first, others
        breakdown = {"tasks": len(rows), "incomplete": incomplete}
        if rows:  # each figure a column at a time: the report's peak is one column's
            complete = _Complete(table, rows, arrivals, decided)
            breakdown |= _shares((complete.column(i) for i in range(len(PARTS))), PARTS)
            breakdown["components"] = _shares(
                (complete.column(len(PARTS) + i) for i in range(len(COMPONENTS))), COMPONENTS)
        return groups.figures(), breakdown, starts

    def _jct(self) -> dict:
        """JCT's figures, the slowdown, and the weighted mean JCT: sum of weight x JCT over
        the sum of weights, over the jobs done (`weighted`: whether any weight is not 1, so
        the weighted mean says more than the mean)."""
        groups, slowdown = _Groups(), []
        weighted = total_weight = 0.0
        unit_weights = True
        for job in self.jobs.values():
            if job.done is None or job.arrival is None or job.failed:
                continue
            value = job.done - job.arrival
            groups.add(job, value)
            weighted += job.weight * value
            total_weight += job.weight
            unit_weights = unit_weights and job.weight == 1.0
            if job.longest_task > 0:
                slowdown.append(value / job.longest_task)
        return groups.figures() | {
            "slowdown": summary(slowdown),
            "weighted_mean": weighted / total_weight if total_weight > 0 else None,
            "weighted": not unit_weights}

    def _counts(self, tasks_started: int) -> dict:
        jobs = self.jobs.values()
        counts = {
            "jobs_arrived": sum(job.arrival is not None for job in jobs),
            "jobs_done": sum(job.done is not None and not job.failed for job in jobs),
            "jobs_failed": sum(job.failed for job in jobs),
            "tasks_started": tasks_started,
        }
        for name in ("launches", "launches_queued", "launches_refused", "repartitions",
                     "preemption_attempts", "preemptions", "preemptions_refused",
                     "suspensions", "resumes", "requeues", "tasks_lost", "tasks_failed",
                     "nodes_down", "copies_launched", "copies_cancelled",
                     "events_missing_fields"):
            counts[name] = self.counts.get(name, 0)
        counts["launches_refused_by_reason"] = dict(self.refusals.most_common())
        counts["requeues_by_reason"] = dict(self.requeues.most_common())
        return counts

    def _fairness(self, starts: _Starts) -> dict:
        import numpy as np

        capacity = sum(self.capacity.values())
        result: dict = {"capacity_cpu_m": capacity, "configured": dict(sorted(
            self.shares.items()))}
        # per queue, the changes of what it holds, by time (and change): +cpu at an attempt's
        # start at the LM, -cpu at its end there
        table = self.attempts
        size = len(table)
        held = np.zeros(0, dtype=np.int64)
        if size:
            lm_start = np.frombuffer(table.lm_start, count=size)
            held = np.flatnonzero(~np.isnan(lm_start)
                                  & (np.frombuffer(table.cpu_m, dtype=np.int64, count=size)
                                     != 0))
            del lm_start  # the views go before anything could feed the table again
        if not held.size or capacity <= 0:
            return result | {"mean_share": {}, "series": {"t": [], "users": {}}}
        by_user: dict[str, list[int]] = {}
        for row in held.tolist():
            by_user.setdefault(table.user[row], []).append(row)
        del held
        changes = {user: _changes(table, rows) for user, rows in by_user.items()}
        del by_user
        start = min(float(times[0]) for times, _ in changes.values())
        end = max(float(times[-1]) for times, _ in changes.values())
        grid = np.linspace(start, end, SERIES_POINTS) if end > start else np.array([start])
        series, mean, active = {}, {}, {}
        spans = self._waiting_spans(end, starts)
        for user in sorted(set(self.shares) | changes.keys()):
            # a configured queue that held nothing: nothing from the first change on
            times, deltas = changes.pop(user, (np.array([start]), [0]))
            steps = np.cumsum(deltas)
            # the cpu the user holds at each grid time: the last change at or before it
            held_at = np.where(np.searchsorted(times, grid, side="right") > 0,
                               steps[np.maximum(np.searchsorted(times, grid, side="right") - 1,
                                                0)], 0)
            series[user] = (held_at / capacity).round(4).tolist()
            mean[user] = _time_weighted_mean(times, steps, start, end) / capacity
            if spans.get(user):
                active[user] = _mean_over_spans(times, steps, spans[user]) / capacity
        return result | {"mean_share": mean, "waiting_share": active,
                         "series": {"t": (grid - start).round(3).tolist(), "users": series}}

    def _waiting_spans(self, end: float,
                       starts: _Starts) -> dict[str, list[tuple[float, float]]]:
        """Per user queue, the times it had tasks waiting for their first start (from a job's
        arrival to its last task's first start; a task never started: until `end`), as
        disjoint spans. Its share over them is what it got while it wanted more: a queue
        whose jobs are all served early in a long run has a small share over the run without
        being held back, and one kept from its share has a small share here too."""
        started, last_start = starts.started, starts.last
        by_user: dict[str, list[tuple[float, float]]] = {}
        for job_id, job in self.jobs.items():
            if job.arrival is not None:
                waited_until = (last_start.get(job_id, end) if started[job_id] >= job.tasks
                                else end)
                by_user.setdefault(job.user, []).append((job.arrival, waited_until))
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

    def _estimation(self) -> dict:
        predictors = Counter(done.predictor for done in self.estimated.values())
        ratios, with_estimate, wide, right = [], 0, 0, 0
        bins: dict[str, list[float]] = {name: [] for name in JCT_BINS}
        for job_id, done in self.estimated.items():
            estimate = done.estimate
            if estimate is None and job_id in self.first_estimates:
                estimate = self.first_estimates[job_id][1]
            if estimate is not None:
                with_estimate += 1
                if estimate > 0 and done.work > 0:
                    ratios.append(estimate / done.work)
                if not done.thin and done.level is not None and done.true_level is not None:
                    wide += 1
                    right += done.level == done.true_level
            job = self.jobs.get(job_id)
            if (done.true_level is not None and job is not None and job.done is not None
                    and job.arrival is not None and not job.failed):
                name = ("thin" if done.thin else "wide") + (
                    "_long" if done.true_level >= 1 else "_short")
                bins[name].append(job.done - job.arrival)
        delays = [ts - self.jobs[job_id].arrival
                  for job_id, (ts, _, _) in self.first_estimates.items()
                  if job_id in self.jobs and self.jobs[job_id].arrival is not None]
        return {
            "predictor": "+".join(sorted(predictors)),
            "jobs_done": len(self.estimated),
            "jobs": with_estimate,
            "jobs_thin": sum(done.thin for done in self.estimated.values()),
            "jobs_estimated": len(self.first_estimates),
            "error": _error(ratios),
            "correct_queue_share_wide": right / wide if wide else None,
            "correct_queue_wide_jobs": wide,
            "jct_by_bin": {name: _mean_p50(values) for name, values in bins.items()},
            "estimation_delay": summary(delays),
            **self._sampling_ratios(),
        }

    def _had_copies(self) -> bool:
        """Any copy_launched or copy_won line (each copy_won adds its checkpoints)."""
        return bool(self.counts["copies_launched"] or self.races.checkpoints)

    def _redundancy(self) -> dict:
        races = self.races
        wins_by_copy = len(races.beaten)
        wins = wins_by_copy + races.wins_by_original
        originals = set(self.attempts.copy_of.values())
        useful, wasted_copies, wasted_originals = self._work_by_outcome()
        wasted = wasted_copies + wasted_originals
        return {
            "copies_launched": self.counts["copies_launched"],
            "copies_cancelled": self.counts["copies_cancelled"],
            "cancelled_by_why": dict(races.cancelled.most_common()),
            "tasks_with_copies": len(originals),
            "tasks_won": wins,
            "wins_by_copy": wins_by_copy,
            "wins_by_original": races.wins_by_original,
            "wins_by_copy_share": wins_by_copy / wins if wins else None,
            "checkpoints_per_task": _mean_p50(races.checkpoints) | (
                {"max": max(races.checkpoints)} if races.checkpoints else {}),
            "checkpoint_answers": self.counts["checkpoint_answers"],
            "restores": self.counts["restores"],
            "late_finishes": self.counts["copies_finished_late"],
            "useful_work": useful,
            "wasted_work": wasted,
            "wasted_work_by": {"copies": wasted_copies, "originals": wasted_originals},
            "wasted_work_share": wasted / useful if useful > 0 else None,
        }

    def _work_by_outcome(self) -> tuple[float, float, float]:
        """(useful, wasted by copies, wasted by originals) work-seconds, from the workers'
        `own_work`. An attempt lost its race if it is a copy that did not win (cancelled, or
        finished after its cancel) or an original a copy beat (stopped, or finished on its
        worker after the copy's win); its work is wasted whichever line ended it. The work of
        every other finished attempt is useful; other cancels (by a GM, say) are neither."""
        beaten, winners = self.races.beaten, set(self.races.beaten.values())
        table = self.attempts
        own_work, flags, copies = table.own_work, table.flags, table.copy_of
        useful = wasted_copies = wasted_originals = 0.0
        for attempt_id, row in table.ids.items():
            work = own_work[row]
            if work != work:  # NaN: no end line with its work
                continue
            if row in copies and attempt_id not in winners:
                wasted_copies += work
            elif attempt_id in beaten:
                wasted_originals += work
            elif flags[row] & FINISHED:
                useful += work
        return useful, wasted_copies, wasted_originals

    def _sampling_ratios(self) -> dict:
        import numpy as np

        arrivals = [job.arrival for job in self.jobs.values() if job.arrival is not None]
        start = min(arrivals, default=0.0)
        points = sorted((self.jobs[job_id].arrival - start, ratio)
                        for job_id, ratio in self.sampling.items()
                        if self.jobs[job_id].arrival is not None)
        if len(points) > RATIO_POINTS:  # evenly spaced in arrival order, first and last kept
            keep = np.linspace(0, len(points) - 1, RATIO_POINTS).round().astype(int)
            points = [points[i] for i in keep]
        counts = Counter(self.sampling.values())
        return {"sampling_ratio_over_time": [[round(t, 6), ratio] for t, ratio in points],
                "sampling_ratio_counts": {repr(ratio): counts[ratio]
                                          for ratio in sorted(counts)}}


def _error(ratios: list[float]) -> dict:
    """estimate / work: its p10, p50, p90, the mean of |log10| (0 for exact estimates, 1 for
    estimates off by ten times either way) and a CDF to plot."""
    import numpy as np

    if not ratios:
        return {"count": 0}
    array = np.asarray(ratios, dtype=float)
    p10, p50, p90 = np.percentile(array, [10, 50, 90])
    return {"count": int(array.size), "p10": float(p10), "p50": float(p50), "p90": float(p90),
            "mean_abs_log10": float(np.abs(np.log10(array)).mean()),
            "cdf": _cdf(array, ERROR_CDF_POINTS)}


def _mean_p50(values: list[float]) -> dict:
    import numpy as np

    if not values:
        return {"count": 0}
    array = np.asarray(values, dtype=float)
    return {"count": int(array.size), "mean": float(array.mean()),
            "p50": float(np.percentile(array, 50))}


def _time_weighted_mean(times: np.ndarray, steps: np.ndarray, start: float,
                        end: float) -> float:
    import numpy as np

    if end <= start:
        return float(steps[-1])
    edges = np.append(np.clip(times, start, end), end)
    return float(np.sum(steps * np.diff(edges)) / (end - start))


def _mean_over_spans(times: np.ndarray, steps: np.ndarray,
                     spans: list[tuple[float, float]]) -> float:
    """The mean of the step function (`steps[i]` from `times[i]` on, 0 before the first)
    over the union of `spans` (disjoint)."""
    import numpy as np

    # the integral from the first time to each change, then to any x by its last change
    before = np.concatenate(([0.0], np.cumsum(steps[:-1] * np.diff(times))))

    def integral(x: float) -> float:
        k = int(np.searchsorted(times, x, side="right")) - 1
        return 0.0 if k < 0 else float(before[k] + steps[k] * (x - times[k]))

    length = sum(b - a for a, b in spans)
    return sum(integral(b) - integral(a) for a, b in spans) / length


def _changes(table: AttemptTable, rows: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """One queue's changes of the cpu it holds, from its attempts at `rows`: their times
    and the changes, sorted by time, then change."""
    import numpy as np

    size, at = len(table), np.array(rows, dtype=np.int64)
    ends = np.frombuffer(table.lm_end, count=size)[at]
    ended = ~np.isnan(ends)
    cpu = np.frombuffer(table.cpu_m, dtype=np.int64, count=size)[at]
    times = np.concatenate((np.frombuffer(table.lm_start, count=size)[at], ends[ended]))
    deltas = np.concatenate((cpu, -cpu[ended]))
    order = np.lexsort((deltas, times))
    return times[order], deltas[order]


CHUNK = 8192  # tasks a step of `_Complete` takes: small temporaries


class _Complete:
    """The tasks whose first start has all its lines (`rows`, their jobs' `arrivals`, their
    first decisions' rows `decided`), and their PARTS and COMPONENTS (the module's
    docstring), each figure by the very operations, in the very order, of the per-task
    formulas."""

    def __init__(self, table: AttemptTable, rows: array, arrivals: array,
                 decided: array) -> None:
        self.table, self.rows, self.arrivals, self.decided = table, rows, arrivals, decided

    def column(self, index: int) -> np.ndarray:
        """Figure `index` (PARTS, then COMPONENTS) of every task, a chunk at a time."""
        import numpy as np

        values = np.empty(len(self.rows))
        for begin in range(0, len(self.rows), CHUNK):
            values[begin:begin + CHUNK] = self._figures(slice(begin, begin + CHUNK))[index]
        return values

    def _figures(self, chunk: slice) -> tuple[np.ndarray, ...]:
        import numpy as np

        table, size = self.table, len(self.table)
        at = np.frombuffer(self.rows, dtype=np.int64)[chunk]
        first = np.frombuffer(self.decided, dtype=np.int64)[chunk]
        arrival = np.frombuffer(self.arrivals)[chunk]

        def take(name: str, where: np.ndarray = at) -> np.ndarray:
            return np.frombuffer(getattr(table, name), count=size)[where]

        placed, placed_h = take("placed"), take("placed_h")
        launched, launched_h = take("launched"), take("launched_h")
        received, received_h = take("received"), take("received_h")
        started = take("started")
        gm_in = placed - placed_h  # the start of its placing step
        lm_in, worker_in = launched - launched_h, received - received_h
        steps = placed_h + launched_h + received_h
        # the hops GM -> LM and LM -> worker, from one line's stamp to the next's step start
        hops = ((lm_in - placed) + worker_in) - launched
        first_start = take("placed", first) - take("placed_h", first)
        first_wait = np.zeros(len(at))
        gm_work, lm_work, worker_work, flights = placed_h, launched_h, received_h, hops
        if table.stamps is not None:  # a simulation's (wait_s, flight_s, work_s) on lines
            flags = np.frombuffer(table.flags, dtype=np.uint8, count=size)
            stamps = np.frombuffer(table.stamps, count=9 * size).reshape(size, 9)
            mine, bits = stamps[at], flags[at]
            on_gm, on_lm, on_worker = ((bits & STAMPED[line]) != 0
                                       for line in ("placed", "launched", "received"))
            first_wait = np.where((flags[first] & STAMPED["placed"]) != 0, stamps[first, 0],
                                  0.0)
            del flags, stamps  # the table's own memory: no view of it outlives the report
            gm_work = np.where(on_gm, mine[:, 2], placed_h)
            lm_work = np.where(on_lm, mine[:, 5], launched_h)
            worker_work = np.where(on_worker, mine[:, 8], received_h)
            flights = np.where(on_lm & on_worker, mine[:, 4] + mine[:, 7], hops)
        return (gm_in - arrival,  # PARTS
                steps,
                (lm_in - placed) + (worker_in - launched),
                started - received,
                flights,  # COMPONENTS
                gm_work, lm_work, worker_work,
                first_wait + (hops - flights),
                steps - ((gm_work + lm_work) + worker_work),
                gm_in - first_start,
                (first_start - first_wait) - arrival,
                started - received)


def _axis0_mean(values: np.ndarray) -> float:
    """The mean numpy takes along axis 0 of a row per task, which the report's figures
    always were: a running sum from 0.0, task after task, over the count (`values.mean()`,
    a pairwise sum, rounds differently)."""
    import numpy as np

    total = 0.0
    for begin in range(0, len(values), CHUNK):
        total = float(np.add.accumulate(np.concatenate(([total],
                                                        values[begin:begin + CHUNK])))[-1])
    return total / len(values)


def _shares(columns: Iterable[np.ndarray], names: tuple[str, ...]) -> dict:
    """Each column's mean, median and share of the sum of the means (a value per task), the
    columns one after the other."""
    import numpy as np

    figures = [(_axis0_mean(column), float(np.percentile(column, 50))) for column in columns]
    means = np.array([mean for mean, _ in figures])
    medians = [median for _, median in figures]
    total = means.sum()
    return {"mean_s": dict(zip(names, means.tolist(), strict=True)),
            "p50_s": dict(zip(names, medians, strict=True)),
            "share": dict(zip(names, (means / total if total > 0 else means * 0).tolist(),
                              strict=True))}


# -- one handler per event kind ----------------------------------------------------------------


def _job_arrived(run: RunAnalysis, e: dict) -> None:
    job = run.jobs[e["job"]]
    arrival = float(e.get("arrival", e["ts"]))
    job.arrival = arrival if job.arrival is None else min(job.arrival, arrival)
    job.user = e.get("user", job.user)
    job.tasks = int(e.get("tasks", job.tasks))
    weight = e.get("weight")  # the GM logs it since weights count; older logs: 1
    if weight is not None:
        job.weight = float(weight)
    ratio = e.get("sampling_ratio")  # slearn's, on wide jobs (job_done repeats it)
    if ratio is not None:
        run.sampling[e["job"]] = float(ratio)


def _job_ended(run: RunAnalysis, e: dict) -> None:
    job = run.jobs[e["job"]]
    _job_arrived(run, e)  # job_done carries the arrival too: a log without job_arrived works
    job.done = e["ts"] if job.done is None else min(job.done, e["ts"])
    job.failed = e["event"] == "job_failed"


def _job_done(run: RunAnalysis, e: dict) -> None:
    _job_ended(run, e)
    if "predictor" in e:  # a job policy with priority queues
        estimate, level, true_level = e.get("estimate"), e.get("level"), e.get("true_level")
        run.estimated[e["job"]] = _Estimated(
            predictor=str(e["predictor"]),
            estimate=None if estimate is None else float(estimate),
            work=float(e["work"]),
            level=None if level is None else int(level),
            true_level=None if true_level is None else int(true_level),
            thin=bool(e.get("thin", False)))


def _job_estimated(run: RunAnalysis, e: dict) -> None:
    estimate = e.get("estimate")
    known = run.first_estimates.get(e["job"])
    if known is None or e["ts"] < known[0]:
        run.first_estimates[e["job"]] = (
            float(e["ts"]), None if estimate is None else float(estimate),
            str(e.get("predictor", "")))


def _stamps(e: dict) -> tuple[float, float, float] | None:
    """A simulation's (wait_s, flight_s, work_s) on a timed line; None on the services'."""
    if "work_s" not in e:
        return None
    return float(e["wait_s"]), float(e["flight_s"]), float(e["work_s"])


def _placed(run: RunAnalysis, e: dict) -> None:
    table = run.attempts
    row = table.row(e["attempt"])
    table.task[row] = e["task"]
    table.placed[row], table.placed_h[row] = e["ts"], float(e.get("handle_s", 0.0))
    table.set_stamps(row, "placed", _stamps(e))


def _launched(run: RunAnalysis, e: dict) -> None:
    run.counts["launches"] += 1
    table = run.attempts
    row = table.row(e["attempt"])
    table.task[row] = e["task"]
    table.launched[row], table.launched_h[row] = e["ts"], float(e.get("handle_s", 0.0))
    table.set_stamps(row, "launched", _stamps(e))
    table.cpu_m[row], table.user[row] = int(e.get("cpu_m", 0)), e["user"]
    if e.get("queued"):  # it holds resources from its start at the worker
        run.counts["launches_queued"] += 1
        table.flags[row] |= QUEUED
        table.lm_start[row] = table.started[row]
    else:
        table.lm_start[row] = e["ts"]


def _received(run: RunAnalysis, e: dict) -> None:
    table = run.attempts
    row = table.row(e["attempt"])
    received = table.received[row]
    if received != received or e["ts"] < received:  # NaN: none yet
        table.received[row], table.received_h[row] = e["ts"], float(e.get("handle_s", 0.0))
        table.set_stamps(row, "received", _stamps(e))


def _started(run: RunAnalysis, e: dict) -> None:
    if e.get("resumed"):  # a suspended attempt running again: its first start counts
        run.counts["resumes"] += 1
        return
    table = run.attempts
    row = table.row(e["attempt"])
    if table.flags[row] & QUEUED:
        table.lm_start[row] = e["ts"]
    table.task[row] = e["task"]
    table.started[row] = e["ts"]
    received = table.received[row]
    if received != received:  # started at once: received and started by one event
        table.received[row], table.received_h[row] = e["ts"], float(e.get("handle_s", 0.0))
        table.set_stamps(row, "received", _stamps(e))
    copy_of = e.get("copy_of")
    if copy_of is not None:
        table.copy_of[row] = copy_of
    # a copy (or a run from a checkpoint) does only the work left: that is its nominal time
    duration = float(e.get("duration") or 0.0) - float(e.get("start_work") or 0.0)
    run_for = e.get("run_for")  # on a node whose speed varies: how long the run lasts
    if run_for is not None and duration > 0:
        run.run_ratios.append(float(run_for) / duration)
        duration = float(run_for)
    if copy_of is None:  # a copy's run does not make its job longer: it only hedges
        job = run.jobs[e["job"]]
        job.longest_task = max(job.longest_task, duration)


def _lm_end(run: RunAnalysis, e: dict) -> None:
    # task_finished and task_failed are logged by the worker too (with a `worker` field); the
    # LM's are the truth that shares and counts are taken from
    table = run.attempts
    if "worker" in e:
        own_work = e.get("own_work")  # the worker's measure of the work the attempt did
        if own_work is not None:
            row = table.row(e["attempt"])
            table.own_work[row] = float(own_work)
            table.flag(row, FINISHED, e["event"] == "task_finished")
        return
    table.lm_end[table.row(e["attempt"])] = e["ts"]
    counter = {"task_lost": "tasks_lost", "task_failed": "tasks_failed",
               "task_preempted": "preemptions"}.get(e["event"])
    if counter:
        run.counts[counter] += 1


def _counter(name: str):
    def count(run: RunAnalysis, e: dict) -> None:
        run.counts[name] += 1
    return count


def _refused(run: RunAnalysis, e: dict) -> None:
    run.counts["launches_refused"] += 1
    run.refusals[e.get("reason", "?")] += 1


def _requeued(run: RunAnalysis, e: dict) -> None:
    run.counts["requeues"] += 1
    run.requeues[e.get("reason", "?")] += 1


# The copy handlers read every field they need before they count: a line missing one is
# counted in events_missing_fields only, not half taken.


def _copy_of(run: RunAnalysis, attempt_id: str, original: str | None) -> None:
    """The attempt is a copy of `original` (None: of no attempt)."""
    row = run.attempts.row(attempt_id)
    if original is None:
        run.attempts.copy_of.pop(row, None)
    else:
        run.attempts.copy_of[row] = original


def _copy_launched(run: RunAnalysis, e: dict) -> None:
    attempt_id, original = e["attempt"], e["original"]
    run.counts["copies_launched"] += 1
    _copy_of(run, attempt_id, original)


def _copy_cancelled(run: RunAnalysis, e: dict) -> None:
    attempt_id, original = e["attempt"], e["original"]
    run.counts["copies_cancelled"] += 1
    run.races.cancelled[e.get("why", "?")] += 1
    _copy_of(run, attempt_id, original)


def _copy_won(run: RunAnalysis, e: dict) -> None:
    original, winner, checkpoints = e["original"], e["winner"], int(e["checkpoints"])
    if e["by_copy"]:
        run.races.beaten[original] = winner
    else:
        run.races.wins_by_original += 1
    run.races.checkpoints.append(checkpoints)  # one per copy_won: the section's presence too


def _copy_finished_late(run: RunAnalysis, e: dict) -> None:
    run.counts["copies_finished_late"] += 1
    if e.get("original") is not None:  # else the worker's start of the copy names it
        _copy_of(run, e["attempt"], e["original"])


def _gm_starting(run: RunAnalysis, e: dict) -> None:
    run.shares.update(e.get("shares") or {})
    if e.get("policies"):
        run.policies = dict(e["policies"])


def _lm_started(run: RunAnalysis, e: dict) -> None:
    if "cpu_m" in e:
        run.capacity[e["lm"]] = int(e["cpu_m"])


_HANDLERS = {
    "job_arrived": _job_arrived,
    "job_done": _job_done,
    "job_estimated": _job_estimated,
    "job_failed": _job_ended,
    "task_placed": _placed,
    "task_launched": _launched,
    "task_queued": _received,
    "task_started": _started,
    "launch_refused": _refused,
    "repartition": _counter("repartitions"),
    "preemption_requested": _counter("preemption_attempts"),
    "preemption_refused": _counter("preemptions_refused"),
    "task_requeued": _requeued,
    "node_down": _counter("nodes_down"),
    "task_suspended": _counter("suspensions"),
    "gm_starting": _gm_starting,
    "lm_started": _lm_started,
    "copy_launched": _copy_launched,
    "copy_cancelled": _copy_cancelled,
    "copy_won": _copy_won,
    "copy_finished_late": _copy_finished_late,
    "task_checkpointed": _counter("checkpoint_answers"),
    "task_restored": _counter("restores"),
    **dict.fromkeys(LM_ENDS, _lm_end),
}
# the events `RunAnalysis.feed` reads: a driver that writes no log may leave out the others
EVENTS_READ = frozenset(_HANDLERS)
