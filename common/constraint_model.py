"""The placement-constraint model: which constraints machines have and tasks ask for.

Numbers from ../shared/WORKLOADS.md, taken from the Megha authors' constraint-aware
simulator (the public stand-in for Sharma et al.'s tables, which we could not reach):
machines carry each of 21 constraints independently with `MACHINE_CONSTRAINT_PERCENT[j]`;
a task draws a type (1 of 4), a statistical cluster by the type's weights, then includes
each constraint with that cluster's frequency. Deterministic for a given `random.Random`.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

NUM_CONSTRAINTS = 21

MACHINE_CONSTRAINT_PERCENT: tuple[int, ...] = (
    38, 66, 16, 38, 68, 11, 28, 16, 70, 73, 49, 47, 32, 8, 69, 15, 56, 28, 67, 70, 100,
)

_TCFV_CLUSTER_1 = (8, 7, 7, 10, 23, 20, 30, 1, 3, 1, 4, 3, 2, 1, 4, 2, 9, 8, 11, 25, 29)
_CLUSTER_SCALE = (1.0, 0.94, 0.98, 0.72, 1.21, 0.82, 1.09, 0.59, 0.71, 0.90)
TASK_CONSTRAINT_PERCENT: tuple[tuple[float, ...], ...] = tuple(
    tuple(p * scale for p in _TCFV_CLUSTER_1) for scale in _CLUSTER_SCALE
)
CLUSTER_WEIGHTS_BY_TYPE: tuple[tuple[float, ...], ...] = (
    (0.0396, 0.1405, 0.0591, 0.1203, 0.0899, 0.1100, 0.0899, 0.1405, 0.1203, 0.0899),
    (0.1204, 0.0797, 0.1102, 0.1204, 0.0998, 0.0998, 0.0593, 0.1303, 0.0901, 0.0900),
    (0.1304, 0.1608, 0.1507, 0.0493, 0.1608, 0.1205, 0.0289, 0.0493, 0.1205, 0.0289),
    (0.1168, 0.1205, 0.1338, 0.0966, 0.1168, 0.1102, 0.0493, 0.1039, 0.0998, 0.0524),
)


def machine_constraints(
    rng: random.Random, percent: Sequence[float] = MACHINE_CONSTRAINT_PERCENT
) -> frozenset[int]:
    return frozenset(j for j, p in enumerate(percent) if rng.random() * 100 < p)


def task_constraints(rng: random.Random, unconstrained_share: float = 0.0) -> frozenset[int]:
    """A task's constraint set; `unconstrained_share` forces that fraction to carry none."""
    if unconstrained_share and rng.random() < unconstrained_share:
        return frozenset()
    weights = CLUSTER_WEIGHTS_BY_TYPE[rng.randrange(4)]
    cluster = rng.choices(range(10), weights=weights)[0]
    return frozenset(
        j for j, p in enumerate(TASK_CONSTRAINT_PERCENT[cluster]) if rng.random() * 100 < p
    )
