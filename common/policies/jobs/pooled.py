"""The pooled interval LP: the packing paper's job order for a GM, whose cluster is too large
for a column per task and machine.

A GM orders the jobs it owns; what its LP may know of a job is what the job states: its weight,
its tasks' durations and demands (summed into a volume per resource) and its longest task. The
LP treats the GM's share of the federation as one pool of capacity and each job as work that
occupies it:

- time is cut at e_0 = u, e_l = u (1+ε)^l (u the shortest job span), up to a horizon that
  every job fits before (all releases, plus the longest span, plus all the volume in turn);
- Z[j, l] is the share of job j done by e_l, cumulative: it never decreases, it is 1 at the
  horizon, and 0 up to the job's release;
- the pool packs: Σ_j V[j, d] Z[j, l] <= e_l for every resource d, V the job's volume in
  seconds of the whole pool (its resource-seconds over the pool's capacity);
- C_j >= Σ_l (left point of interval l) (Z[j, l] - Z[j, l-1]), and C_j >= r_j + its span,
  and C_j >= r_j + its volume on any resource (the whole pool to itself goes no faster);

minimising Σ w_j C_j. A job's C_j orders it: lowest first.

This is the paper's interval LP with every machine merged into one and a job's tasks merged
into its volume; it ignores how tasks fragment across nodes and where they may run, so its
value is not reported as a bound (the packing experiment's per-machine LP is). A job whose
tasks use their resources in unequal proportions is done in one share Z on every resource,
which a schedule need not be: one more reason it only orders.

Pure computation (numpy, scipy's HiGHS). It reads no clock: HiGHS keeps to the `time_limit` it is
given, and the driver measures the step the solve happens in (`handle_s` on `jobs_reordered`).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import sparse
from scipy.optimize import linprog


class LPTimeout(RuntimeError):
    """The solver ran out of its time limit: no order, and no bound, from this solve."""


@dataclass(frozen=True, slots=True)
class PooledJob:
    key: int  # the caller's id for it
    weight: float
    release: float  # when it may start, seconds from now (0: already here)
    volume: tuple[float, ...]  # per resource: seconds of the whole pool its work takes
    span: float  # the least time it still needs: its longest remaining task


@dataclass(slots=True)
class PooledSolution:
    completion: dict[int, float]  # key -> C_j, seconds from now
    # key -> the LP interval C_j falls in (0 the first): the LP measures completion only to
    # within an interval (left points), so jobs of one interval are alike to it
    interval: dict[int, int]
    variables: int
    rows: int
    # jobs whose C_j is their own lower bound (release plus span or volume): the pool's
    # capacity did not delay them, so the LP orders them by their spans alone, not weights
    at_own_bound: int


def _points(first: float, horizon: float, epsilon: float) -> list[float]:
    points = [first]
    while points[-1] < horizon:
        points.append(points[-1] * (1 + epsilon))
    return points


def pooled_lp(jobs: Sequence[PooledJob], *, epsilon: float = 0.5,
              time_limit: float | None = None) -> PooledSolution:
    """Each job's LP completion time; raises `LPTimeout` if HiGHS runs out of time."""
    if not jobs:
        return PooledSolution({}, {}, 0, 0, 0)
    spans = [job.span for job in jobs if job.span > 0]
    # times in units of the median span, so that HiGHS sees numbers near 1
    unit = float(np.median(spans)) if spans else 1.0
    resources = len(jobs[0].volume)
    total = [sum(job.volume[d] for job in jobs) for d in range(resources)]
    horizon = (max(job.release for job in jobs) + max(job.span for job in jobs)
               + max(total)) / unit
    first = max(min(spans) / unit if spans else 1.0, horizon * 1e-6)
    points = _points(first, horizon, epsilon)
    left = [0.0] + points[:-1]
    n, levels = len(jobs), len(points)
    width = n * levels + n  # Z[j, l], then C_j

    def z(j: int, level: int) -> int:
        return j * levels + level

    cost = np.zeros(width)
    lower = np.zeros(width)
    upper = np.ones(width)
    rows, cols, vals, rhs = [], [], [], []

    def row(entries: list[tuple[int, float]], bound: float) -> None:
        r = len(rhs)
        for c, v in entries:
            rows.append(r)
            cols.append(c)
            vals.append(v)
        rhs.append(bound)

    for j, job in enumerate(jobs):
        c = n * levels + j
        cost[c] = job.weight
        release = job.release / unit
        lower[c] = release + max(job.span, *job.volume) / unit  # alone, the pool's all
        upper[c] = math.inf
        lower[z(j, levels - 1)] = 1.0
        for level in range(levels):
            if points[level] <= release:
                upper[z(j, level)] = 0.0  # nothing of it is done before it arrives
            if level + 1 < levels:
                row([(z(j, level), 1.0), (z(j, level + 1), -1.0)], 0.0)
        completion = [(z(j, level), left[level] - left[level + 1]) for level in range(levels - 1)]
        row(completion + [(z(j, levels - 1), left[levels - 1]), (c, -1.0)], 0.0)
    for d in range(resources):
        for level in range(levels):
            row([(z(j, level), job.volume[d] / unit) for j, job in enumerate(jobs)
                 if job.volume[d] > 0], points[level])
    matrix = sparse.coo_matrix((vals, (rows, cols)), shape=(len(rhs), width))
    options = {} if time_limit is None else {"time_limit": time_limit}
    result = linprog(cost, A_ub=matrix, b_ub=np.array(rhs), bounds=np.column_stack([lower, upper]),
                     method="highs", options=options)
    if result.status == 1:
        raise LPTimeout(f"the pooled LP ran out of its {time_limit} s")
    if result.status != 0:
        raise RuntimeError(f"the pooled LP failed: {result.message}")
    values = result.x[n * levels:]
    at_bound = int(np.sum(values <= lower[n * levels:] * (1 + 1e-6) + 1e-9))
    completion = {job.key: float(values[j]) * unit for j, job in enumerate(jobs)}
    interval = {job.key: bisect.bisect_left(points, float(values[j]) * (1 - 1e-9))
                for j, job in enumerate(jobs)}
    return PooledSolution(completion, interval, width, len(rhs), at_bound)
