"""The LP relaxations of packing with placement sets: job orders for the schedulers, and the
lower bound every schedule is measured against.

**Interval-indexed LP** (`interval_lp`). Time is cut at geometrically growing points
e_0 = u, e_l = u (1+ε)^l (u the shortest task), up to a horizon no schedule needs to pass.
Per task and machine it may use (a *column*), X[c, l] is the share of the task done there by
e_l, cumulative, so each constraint row stays short; per job, Z[j, l] is the share of the job
done by e_l. The rows, for every l:

- a task is done once: Σ_c X[c, L] = 1; X and Z never decrease;
- a task runs on one machine at a time: Σ_c p_c X[c, l] <= e_l - r_j;
- a machine packs: Σ over its columns p_c a_d X[c, l] <= capacity_d e_l, per resource d;
- a job is done only as far as each of its tasks: Z[j, l] <= Σ_c X[c, l];
- its completion C_j >= Σ_l (left point of interval l) (Z[j, l] - Z[j, l-1]), and
  C_j >= r_j + its longest task's shortest duration;

minimising Σ w_j C_j. Without migration (`migration=False`, the paper's second LP) X[c, l]
means *finished* on that machine by e_l, so it is 0 where the column's duration exceeds
e_l - r_j. Both are relaxations (any schedule of their class gives a feasible point no more
costly), so their optimum bounds every schedule of that class from below; measuring by left
points costs at most a factor 1+ε of tightness.

**Remote machines pooled.** A task that may also run remotely has a column for every machine;
on a large cluster that is too many, so above `exact_columns` columns each task keeps its
local machines and one *pooled remote* column, which only the cluster-wide capacity bounds
(Σ over all columns of volume <= total capacity x e_l). That is still a relaxation, so the
bound stays a bound; the paper instead sampled a few remote machines per task, which helps the
ordering but would not bound. `sample_remote` does that, for a scheduler that needs every
column to be a real machine (`lp-np` maps tasks to them). The solution says which it used
(`reduced`). A task never has a column on a machine it does not fit.

**Ordering LP** (`ordering_lp`, single-machine placement sets only). One variable per pair of
jobs, the share of "i finishes before j"; on every machine m where j has work,
Σ_i δ_ij v_im + v_jm <= capacity C_j (per resource) and C_j >= r_j + its longest task: the
volume a machine finishes by C_j fits in capacity x C_j. Its C_j order jobs for the
preemptive single-machine algorithm.

Pure computation (numpy, scipy's HiGHS); `seconds` is the solver's wall time, for the logs.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np
from scipy import sparse
from scipy.optimize import linprog

from common.errors import InvalidInput
from common.policies.jobs.pooled import LPTimeout
from simulator.models.packing.model import Instance, Task

POOL = -1  # the pooled remote column's machine
DEFAULT_EPSILON = 0.5
DEFAULT_EXACT_COLUMNS = 2_000  # above it, remote machines are pooled (see the docstring)

TaskKey = tuple[int, int]  # (job, index)


@dataclass(slots=True)
class LPSolution:
    kind: str  # "migration", "no-migration" or "ordering"
    objective: float  # Σ w_j C_j over the jobs solved, absolute times
    completion: dict[int, float]  # job -> its LP completion time C_j
    seconds: float
    variables: int
    rows: int
    reduced: str | None = None  # what was relaxed to keep it small, if anything
    # the interval LP's intervals' ends, absolute times
    ends: np.ndarray = field(default_factory=lambda: np.zeros(0))
    # (job, task) -> {machine or POOL: share of the task done there by each interval's end}
    done: dict[TaskKey, dict[int, np.ndarray]] = field(default_factory=dict)

    def order(self, instance: Instance) -> list[int]:
        """Job ids by LP completion, ties by larger weight then id."""
        return sorted(self.completion, key=lambda j: (self.completion[j],
                                                      -instance.jobs[j].weight, j))

    def mass(self, key: TaskKey) -> dict[int, float]:
        """{machine or POOL: share of the task the LP put there}."""
        return {machine: float(done[-1]) for machine, done in self.done[key].items()}

    def half_done(self, key: TaskKey) -> float:
        """The end of the interval by which the LP has half the task done."""
        done = np.sum(list(self.done[key].values()), axis=0)
        return float(self.ends[int(np.argmax(done >= 0.5 - 1e-9))])


def weighted_mean_bound(instance: Instance, solution: LPSolution) -> float:
    """The bound on Σ w (C - r) / Σ w that `solution`'s objective gives."""
    jobs = [instance.jobs[j] for j in solution.completion]
    total = sum(job.weight for job in jobs)
    return (solution.objective - sum(job.weight * job.release for job in jobs)) / total


def _present(instance: Instance, jobs: Iterable[int] | None,
             remaining: Mapping[TaskKey, float] | None) -> tuple[list[int], dict[TaskKey, float]]:
    """The jobs to solve and each of their tasks' remaining share (tasks done are dropped)."""
    ids = list(range(len(instance.jobs))) if jobs is None else list(jobs)
    if not ids:
        raise InvalidInput("jobs", "nothing to solve: no jobs given")
    share: dict[TaskKey, float] = {}
    for j in ids:
        for task in instance.jobs[j].tasks:
            left = 1.0 if remaining is None else remaining.get((j, task.index), 1.0)
            if left > 1e-12:
                share[(j, task.index)] = left
    return ids, share


def _solve(cost: np.ndarray, upper: sparse.coo_matrix, upper_rhs: np.ndarray,
           equal: sparse.coo_matrix, equal_rhs: np.ndarray, bounds: np.ndarray,
           what: str, time_limit: float | None = None) -> tuple[np.ndarray, float, float]:
    started = time.perf_counter()
    result = linprog(cost, A_ub=upper.tocsr(), b_ub=upper_rhs,
                     A_eq=equal.tocsr() if equal.shape[0] else None,
                     b_eq=equal_rhs if equal.shape[0] else None,
                     bounds=bounds, method="highs",
                     options={} if time_limit is None else {"time_limit": time_limit})
    seconds = time.perf_counter() - started
    if result.status == 1:
        raise LPTimeout(f"the {what} LP hit its time limit ({time_limit} s): {result.message}")
    if result.status != 0:
        raise RuntimeError(f"the {what} LP did not solve: {result.message}")
    return result.x, float(result.fun), seconds


class _Rows:
    """A sparse constraint matrix built row by row."""

    def __init__(self) -> None:
        self.rows: list[int] = []
        self.cols: list[int] = []
        self.vals: list[float] = []
        self.rhs: list[float] = []

    def add(self, cols: list[int], vals: list[float], rhs: float) -> None:
        row = len(self.rhs)
        self.rows.extend([row] * len(cols))
        self.cols.extend(cols)
        self.vals.extend(vals)
        self.rhs.append(rhs)

    def matrix(self, width: int) -> tuple[sparse.coo_matrix, np.ndarray]:
        shape = (len(self.rhs), width)
        return (sparse.coo_matrix((self.vals, (self.rows, self.cols)), shape=shape),
                np.array(self.rhs, dtype=float))


def _fitting(instance: Instance, task: Task) -> list[int]:
    """The machines `task` may run on and fits (no schedule runs it elsewhere), local first."""
    return [m for m in instance.allowed(task)
            if all(d <= c for d, c in zip(task.demand, instance.capacities[m], strict=True))]


def _columns(instance: Instance, share: Mapping[TaskKey, float], exact_columns: int,
             sample: bool) -> tuple[list[tuple[TaskKey, int, float]], str | None]:
    """(task, machine or POOL, duration of what is left of it there) for every column.
    Over `exact_columns`, remote machines are pooled (a relaxation: a bound) or, with
    `sample`, each task keeps a few of them drawn at random (the paper's reduction: no
    bound, but every column is a real machine, which a schedule built from the solution
    needs)."""
    tasks = [instance.jobs[j].tasks[i] for j, i in share]
    allowed = {(task.job, task.index): _fitting(instance, task) for task in tasks}
    exact = sum(map(len, allowed.values())) <= exact_columns
    keep = max(1, exact_columns // max(1, len(tasks)))  # machines per task when sampling
    columns: list[tuple[TaskKey, int, float]] = []
    pooled = False
    for task in tasks:
        key = (task.job, task.index)
        left = share[key]
        machines = allowed[key]
        if not exact:
            local = [m for m in machines if m in task.local]
            remote = [m for m in machines if m not in task.local]
            if sample:  # seeded by the task, so a re-solve keeps its machines
                draws = min(len(remote), max(0, keep - len(local)))
                rng = random.Random(key[0] * 1_000_003 + key[1])
                machines = local + sorted(rng.sample(remote, draws))
            else:
                machines = local
                if remote:
                    columns.append((key, POOL, task.duration * task.remote_factor * left))
                    pooled = True
        columns.extend((key, m, task.duration_on(m) * left) for m in machines)
    reduced = ("remote machines pooled into one column per task, bounded by the cluster's "
               "total capacity" if pooled else
               f"local machines and remote ones drawn at random, up to {keep} a task"
               if not exact else None)
    return columns, reduced


def _intervals(first: float, practical: float, safe: float,
               epsilon: float) -> tuple[np.ndarray, np.ndarray]:
    """(ends, left points): geometric from `first` (no job can finish sooner) up to
    `practical` (past where a reasonable schedule ends), then one last point at `safe` (no
    optimal schedule ends later). Any increasing points give a valid relaxation; these keep
    it small where the tightness matters."""
    first = max(first, 1e-6)
    count = max(1, math.ceil(math.log(max(practical / first, 1.0)) / math.log1p(epsilon)) + 1)
    ends = first * (1 + epsilon) ** np.arange(count)
    if ends[-1] < safe:
        ends = np.append(ends, safe)
    lefts = np.concatenate(([0.0], ends[:-1]))
    return ends, lefts


def _horizons(instance: Instance, columns: list[tuple[TaskKey, int, float]],
              release: Mapping[int, float], longest: Mapping[int, float]) -> tuple[float, ...]:
    """(first, practical, safe) points for `_intervals`."""
    slowest: dict[TaskKey, float] = {}
    for key, _, duration in columns:
        slowest[key] = max(slowest.get(key, 0.0), duration)
    latest = max(release.values())
    safe = latest + sum(slowest.values())  # one task after another, each at its slowest
    fastest: dict[TaskKey, float] = {}
    for key, _, duration in columns:
        fastest[key] = min(fastest.get(key, math.inf), duration)
    packed = max(
        sum(fastest[key] * instance.jobs[key[0]].tasks[key[1]].demand[d] for key in fastest)
        / sum(capacity[d] for capacity in instance.capacities)
        for d in range(instance.resources))
    practical = min(safe, latest + 2 * packed + 2 * max(slowest.values()))
    first = min(release[j] + longest[j] for j in release)
    return first, practical, safe


def interval_lp(instance: Instance, *, migration: bool, jobs: Iterable[int] | None = None,
                remaining: Mapping[TaskKey, float] | None = None, now: float = 0.0,
                epsilon: float = DEFAULT_EPSILON,
                exact_columns: int = DEFAULT_EXACT_COLUMNS, sample_remote: bool = False,
                time_limit: float | None = None) -> LPSolution:
    """Solve the interval-indexed LP for `jobs` (default all) from time `now`, each task
    needing its `remaining` share (default 1). Completion times are absolute. Over
    `exact_columns` columns, remote machines are pooled, or sampled if `sample_remote`.

    The whole untouched instance at time 0 (an offline run's order, and its bound) is solved
    once per instance and kept: the experiment's bound and `lp-np-greedy`'s order are one solve."""
    if epsilon <= 0:
        raise InvalidInput("epsilon", f"must be > 0, got {epsilon!r}")
    ids, share = _present(instance, jobs, remaining)
    whole = (now == 0.0 and len(ids) == len(instance.jobs)
             and len(share) == sum(len(job.tasks) for job in instance.jobs)
             and all(left == 1.0 for left in share.values()))
    if not whole:
        return _interval_lp(instance, migration, ids, share, now, epsilon, exact_columns,
                            sample_remote, time_limit)
    # an optimum, whatever its limit
    key = (instance, migration, epsilon, exact_columns, sample_remote)
    solved = _WHOLE.get(key)
    if solved is None:
        solved = _interval_lp(instance, migration, ids, share, now, epsilon, exact_columns,
                              sample_remote, time_limit)
        if len(_WHOLE) >= 4:
            _WHOLE.pop(next(iter(_WHOLE)))
        _WHOLE[key] = solved
    return solved


_WHOLE: dict[tuple, LPSolution] = {}  # the last few whole-instance solves


def _interval_lp(instance: Instance, migration: bool, ids: list[int],
                 share: dict[TaskKey, float], now: float, epsilon: float,
                 exact_columns: int, sample_remote: bool,
                 time_limit: float | None) -> LPSolution:
    columns, reduced = _columns(instance, share, exact_columns, sample_remote)
    # in units of the median column: coefficients near 1 keep the simplex quick and stable
    unit = float(np.median([duration for _, _, duration in columns])) or 1.0
    columns = [(key, m, duration / unit) for key, m, duration in columns]
    release = {j: max(0.0, instance.jobs[j].release - now) / unit for j in ids}
    per_task: dict[TaskKey, list[int]] = {}
    for c, (key, _, _) in enumerate(columns):
        per_task.setdefault(key, []).append(c)
    longest = {j: 0.0 for j in ids}
    for key, cols in per_task.items():
        longest[key[0]] = max(longest[key[0]], min(columns[c][2] for c in cols))
    ends, lefts = _intervals(*_horizons(instance, columns, release, longest), epsilon)
    n_l = len(ends)
    n_x = len(columns) * n_l
    job_row = {j: k for k, j in enumerate(ids)}
    n_z = len(ids) * n_l

    def x(c: int, level: int) -> int:
        return c * n_l + level

    def z(j: int, level: int) -> int:
        return n_x + job_row[j] * n_l + level

    def completion(j: int) -> int:
        return n_x + n_z + job_row[j]

    width = n_x + n_z + len(ids)
    upper, equal = _Rows(), _Rows()
    bounds = np.zeros((width, 2))
    bounds[:, 1] = 1.0
    for c, (key, _, duration) in enumerate(columns):
        r = release[key[0]]
        for level in range(n_l):
            if level:
                upper.add([x(c, level - 1), x(c, level)], [1.0, -1.0], 0.0)
            if ends[level] <= r or (not migration and duration > ends[level] - r + 1e-9):
                bounds[x(c, level), 1] = 0.0
    for key, cols in per_task.items():
        r = release[key[0]]
        for level in range(n_l):
            room = max(0.0, ends[level] - r)
            if len(cols) == 1:  # one machine: the row is a bound on its variable
                c = cols[0]
                bounds[x(c, level), 1] = min(bounds[x(c, level), 1], room / columns[c][2])
            else:
                upper.add([x(c, level) for c in cols], [columns[c][2] for c in cols], room)
            upper.add([z(key[0], level)] + [x(c, level) for c in cols],
                      [1.0] + [-1.0] * len(cols), 0.0)
        equal.add([x(c, n_l - 1) for c in cols], [1.0] * len(cols), 1.0)
    _capacity_rows(instance, columns, ends, upper, x)
    for j in ids:
        for level in range(1, n_l):
            upper.add([z(j, level - 1), z(j, level)], [1.0, -1.0], 0.0)
        steps = [lefts[level] - lefts[level + 1] for level in range(n_l - 1)] + [lefts[-1]]
        upper.add([z(j, level) for level in range(n_l)] + [completion(j)], steps + [-1.0], 0.0)
        bounds[z(j, n_l - 1)] = (1.0, 1.0)
        bounds[completion(j)] = (release[j] + longest[j], np.inf)
    cost = np.zeros(width)
    for j in ids:
        cost[completion(j)] = instance.jobs[j].weight
    a_ub, b_ub = upper.matrix(width)
    a_eq, b_eq = equal.matrix(width)
    kind = "migration" if migration else "no-migration"
    values, objective, seconds = _solve(cost, a_ub, b_ub, a_eq, b_eq, bounds, kind, time_limit)
    shift = sum(instance.jobs[j].weight for j in ids) * now
    solution = LPSolution(kind=kind, objective=objective * unit + shift,
                          completion={j: now + unit * float(values[completion(j)])
                                      for j in ids},
                          seconds=seconds, variables=width, rows=len(b_ub) + len(b_eq),
                          reduced=reduced, ends=now + unit * ends)
    for key, cols in per_task.items():
        solution.done[key] = {columns[c][1]: values[x(c, 0):x(c, 0) + n_l] for c in cols}
    return solution


def _capacity_rows(instance: Instance, columns: list[tuple[TaskKey, int, float]],
                   ends: np.ndarray, upper: _Rows, x) -> None:
    """Per machine and resource, and cluster-wide when a pooled column exists: the volume
    done by e_l fits in capacity x e_l."""
    demand = {key: instance.jobs[key[0]].tasks[key[1]].demand for key, _, _ in columns}
    by_machine: dict[int, list[int]] = {}
    for c, (_, machine, _) in enumerate(columns):
        by_machine.setdefault(machine, []).append(c)
    pooled = POOL in by_machine
    for resource in range(instance.resources):
        groups = [(cols, instance.capacities[m][resource]) for m, cols in by_machine.items()
                  if m != POOL]
        if pooled:
            groups.append((range(len(columns)),
                           sum(capacity[resource] for capacity in instance.capacities)))
        for cols, capacity in groups:
            volumes = [columns[c][2] * demand[columns[c][0]][resource] for c in cols]
            if not any(volumes):
                continue
            for level, end in enumerate(ends):
                upper.add([x(c, level) for c in cols], volumes, capacity * end)


def single_machine(task: Task) -> int:
    """The one machine of a task whose placement set is one machine, no remote allowed."""
    if task.remote_factor is not None or len(task.local) != 1:
        raise InvalidInput(f"jobs[{task.job}].tasks[{task.index}]",
                           "the ordering LP needs every task on exactly one machine, "
                           "no remote runs")
    return next(iter(task.local))


def ordering_lp(instance: Instance, *, jobs: Iterable[int] | None = None,
                remaining: Mapping[TaskKey, float] | None = None,
                now: float = 0.0, time_limit: float | None = None) -> LPSolution:
    """Solve the pairwise ordering LP for `jobs` (single-machine placement sets)."""
    ids, share = _present(instance, jobs, remaining)
    n = len(ids)
    # volume per (job, machine, resource) and each job's longest remaining task
    volume: dict[tuple[int, int], np.ndarray] = {}
    longest = dict.fromkeys(ids, 0.0)
    for (j, i), left in share.items():
        task = instance.jobs[j].tasks[i]
        machine = single_machine(task)
        duration = task.duration * left
        longest[j] = max(longest[j], duration)
        add = duration * np.asarray(task.demand, dtype=float)
        volume[(j, machine)] = volume.get((j, machine), 0.0) + add
    pair: dict[tuple[int, int], int] = {}
    for a in range(n):
        for b in range(a + 1, n):
            pair[(a, b)] = len(pair)
    width = len(pair) + n
    upper = _Rows()
    for b, j in enumerate(ids):
        for (owner, machine), own in volume.items():
            if owner != j:
                continue
            for resource, capacity in enumerate(instance.capacities[machine]):
                if own[resource] <= 0:
                    continue
                cols, vals, rhs = [len(pair) + b], [-capacity], -own[resource]
                for a, i in enumerate(ids):
                    other = volume.get((i, machine))
                    if a == b or other is None or other[resource] <= 0:
                        continue
                    if a < b:  # δ_ij is the pair's variable
                        cols.append(pair[(a, b)])
                        vals.append(other[resource])
                    else:  # δ_ij = 1 - δ_ji
                        cols.append(pair[(b, a)])
                        vals.append(-other[resource])
                        rhs -= other[resource]
                upper.add(cols, vals, rhs)
    bounds = np.zeros((width, 2))
    bounds[: len(pair), 1] = 1.0
    for b, j in enumerate(ids):
        bounds[len(pair) + b] = (max(0.0, instance.jobs[j].release - now) + longest[j], np.inf)
    cost = np.zeros(width)
    for b, j in enumerate(ids):
        cost[len(pair) + b] = instance.jobs[j].weight
    a_ub, b_ub = upper.matrix(width)
    values, objective, seconds = _solve(cost, a_ub, b_ub, sparse.coo_matrix((0, width)),
                                        np.zeros(0), bounds, "ordering", time_limit)
    shift = sum(instance.jobs[j].weight for j in ids) * now
    return LPSolution(kind="ordering", objective=objective + shift,
                      completion={j: now + float(values[len(pair) + b])
                                  for b, j in enumerate(ids)},
                      seconds=seconds, variables=width, rows=len(b_ub))
