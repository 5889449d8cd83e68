"""The placement-constraint model: which constraints machines have and tasks ask for.

Numbers taken from the Megha authors' constraint-aware simulator (the public stand-in for
Sharma et al.'s tables, which we could not reach): machines carry each of 21 constraints
independently with `MACHINE_CONSTRAINT_PERCENT[j]`; a task draws a type (1 of 4), a
statistical cluster by the type's weights, then includes each constraint with that cluster's
frequency. Deterministic for a given `random.Random`. What the model implies (about 1.86
constraints per task, 14% of tasks unconstrained, a random task fits about 41% of machines of
profile A) is computed in closed form at the end of this module.
"""

from __future__ import annotations

import math
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


def task_constraints(rng: random.Random,
                     unconstrained_share: float | None = None) -> frozenset[int]:
    """A task's constraint set.

    With `unconstrained_share=None` the model as published: about 14% of tasks draw no
    constraint. With a share `u` exactly that fraction carries none and the rest are drawn
    from the model conditioned on carrying at least one (the Megha paper quotes Sharma that
    about half of Google's tasks are constrained, so u = 0.5 is the paper's mix).
    """
    if unconstrained_share is not None:
        if not 0.0 <= unconstrained_share <= 1.0:
            raise ValueError(f"unconstrained_share must be in [0, 1], got {unconstrained_share}")
        if rng.random() < unconstrained_share:
            return frozenset()
    while True:
        weights = CLUSTER_WEIGHTS_BY_TYPE[rng.randrange(4)]
        cluster = rng.choices(range(10), weights=weights)[0]
        drawn = frozenset(
            j for j, p in enumerate(TASK_CONSTRAINT_PERCENT[cluster]) if rng.random() * 100 < p
        )
        if drawn or unconstrained_share is None:
            return drawn


# -- what the model implies, in closed form (for documentation and statistical tests) --------


def _cluster_probabilities() -> list[float]:
    """P(statistical cluster c): a type uniformly from 4, then the type's weights."""
    totals = [sum(weights) for weights in CLUSTER_WEIGHTS_BY_TYPE]
    return [
        sum(weights[c] / total for weights, total in zip(CLUSTER_WEIGHTS_BY_TYPE, totals,
                                                         strict=True)) / 4
        for c in range(10)
    ]


def model_unconstrained_share() -> float:
    """P(a task drawn from the published model carries no constraint): about 0.14."""
    return sum(
        p_cluster * math.prod(1 - p / 100 for p in TASK_CONSTRAINT_PERCENT[c])
        for c, p_cluster in enumerate(_cluster_probabilities())
    )


def expected_task_frequencies(unconstrained_share: float | None = None) -> list[float]:
    """P(constraint j is in a task's set), j = 0..20, for `task_constraints` with that share."""
    plain = [
        sum(p_cluster * TASK_CONSTRAINT_PERCENT[c][j] / 100
            for c, p_cluster in enumerate(_cluster_probabilities()))
        for j in range(NUM_CONSTRAINTS)
    ]
    if unconstrained_share is None:
        return plain
    # conditioning on a non-empty draw divides by P(non-empty); the empty draws added none
    constrained = 1 - model_unconstrained_share()
    return [(1 - unconstrained_share) * f / constrained for f in plain]


def expected_fit_fraction(machine_percent: Sequence[float] = MACHINE_CONSTRAINT_PERCENT,
                          unconstrained_share: float | None = None) -> float:
    """P(a random task's constraints are all present on a random machine of the profile):
    about 0.41 for the published vectors."""
    def fits_given_cluster(c: int) -> float:
        # constraint j blocks the fit when the task has it and the machine does not
        return math.prod(1 - TASK_CONSTRAINT_PERCENT[c][j] / 100 * (1 - machine_percent[j] / 100)
                         for j in range(NUM_CONSTRAINTS))

    by_cluster = _cluster_probabilities()
    plain = sum(p * fits_given_cluster(c) for c, p in enumerate(by_cluster))
    if unconstrained_share is None:
        return plain
    empty = model_unconstrained_share()
    fits_if_constrained = (plain - empty) / (1 - empty)  # an empty set fits every machine
    return unconstrained_share + (1 - unconstrained_share) * fits_if_constrained
