"""How many machines each active job runs on, and whether it shares them: the SRPT+R paper's
algorithms for jobs that need one machine at a time, with redundant copies.

A *copy* of a job runs on one machine; copies of one job race, and at each checkpoint the most
advanced copy's progress is given to all of them (so a job progresses as fast as its luckiest
machine). Checkpoints happen only when a job arrives or departs (the paper's Assumption 1), which
is also when the allocation may change. In *multitasking* mode a machine may run several jobs,
each getting an equal share of its rate.

An allocation, for `n` active jobs and `m` machines, is per job a number of dedicated machines
(`copies`, 0 while it waits) and whether it instead shares one machine with other jobs
(`shared`); the shared jobs are spread round-robin over the machines left, each getting an equal
share of its machine. Non-multitasking:

- `srpt`: the m jobs with the least remaining work run, one machine each; the rest wait.
- `srpt+r` (Algorithm 1): as srpt while n >= m; with fewer jobs than machines every job gets
  floor(m/n) copies and the smallest the machines left over, m - (n-1) floor(m/n).

Multitasking (jobs ordered by arrival, the latest last):

- `fair`: n <= m: one machine each; more jobs than machines: all share the m machines.
- `fair+r` (Algorithm 2): as fair when n > m; otherwise floor(m/n) copies each and the latest
  arrival the machines left over.
- `laps` (beta): only the ceil(beta n) latest arrivals run, one machine each while they are at
  most m, sharing the m machines when they are more.
- `laps+r` (beta): the same ceil(beta n) jobs; fewer than m of them get floor(m/k) copies each
  and the latest the rest.

`MACHINE_ALLOCATIONS.make(name, AllocationOptions(beta=...))`: every policy takes the options;
only laps ones read `beta`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from common.policies.copies import check_beta, shares
from common.policies.registry import Registry


@dataclass(frozen=True, slots=True)
class AllocationOptions:
    beta: float = 0.5  # laps, laps+r: the share of the latest arrivals that run

    def __post_init__(self) -> None:
        check_beta(self.beta)


class MachineAllocation(Protocol):
    name: str
    options: AllocationOptions
    multitasking: bool

    def allocate(self, remaining: np.ndarray, arrival: np.ndarray,
                 machines: int) -> tuple[np.ndarray, np.ndarray]:
        """(copies, shared) per active job: dedicated machines, and whether it shares one.
        The dedicated machines plus one per shared job (when fewer shared jobs than the
        machines left) never exceed `machines`."""


# the paper's model only (`megha experiment redundancy`): the federation file's
# [policies.redundancy] chooses among copies.COPY_POLICIES
MACHINE_ALLOCATIONS: Registry[type[MachineAllocation]] = Registry(
    "redundancy experiment", argument="policy", options=AllocationOptions)


def spread(copies: np.ndarray, chosen: np.ndarray, favoured: int, machines: int) -> None:
    """Give the `chosen` jobs floor(m/k) machines each and `favoured` (one of them) the rest."""
    each, rest = shares(len(chosen), machines)
    copies[chosen] = each
    copies[favoured] = rest


class _Policy:
    multitasking = False

    def __init__(self, options: AllocationOptions = AllocationOptions()) -> None:
        self.options = options


@MACHINE_ALLOCATIONS.register("srpt")
class Srpt(_Policy):
    redundant = False

    def allocate(self, remaining, arrival, machines):
        n = len(remaining)
        copies = np.zeros(n, dtype=np.int64)
        order = np.argsort(remaining, kind="stable")
        if n >= machines or not self.redundant or n == 0:
            copies[order[:machines]] = 1
        else:
            spread(copies, order, order[0], machines)
        return copies, np.zeros(n, dtype=bool)


@MACHINE_ALLOCATIONS.register("srpt+r")
class SrptRedundant(Srpt):
    redundant = True


class _Sharing(_Policy):
    """Fair and LAPS: the latest `k` arrivals run; one machine each (or copies, with
    redundancy) while they fit, sharing the machines when they do not."""

    multitasking = True
    redundant = False

    def running(self, n: int) -> int:
        return n

    def allocate(self, remaining, arrival, machines):
        n = len(remaining)
        copies = np.zeros(n, dtype=np.int64)
        shared = np.zeros(n, dtype=bool)
        if n == 0:
            return copies, shared
        k = self.running(n)
        latest = np.argsort(arrival, kind="stable")[n - k:]  # the latest arrival last
        if k > machines:
            shared[latest] = True
        elif self.redundant:
            spread(copies, latest, latest[-1], machines)
        else:
            copies[latest] = 1
        return copies, shared


@MACHINE_ALLOCATIONS.register("fair")
class Fair(_Sharing):
    pass


@MACHINE_ALLOCATIONS.register("fair+r")
class FairRedundant(_Sharing):
    redundant = True


@MACHINE_ALLOCATIONS.register("laps")
class Laps(_Sharing):
    def running(self, n: int) -> int:
        return max(1, math.ceil(self.options.beta * n))


@MACHINE_ALLOCATIONS.register("laps+r")
class LapsRedundant(Laps):
    redundant = True
