"""How many machines each active job runs on: the SRPT+R paper's algorithms for jobs that need
one machine at a time, with redundant copies.

A *copy* of a job runs on one machine; copies of one job race, and at each checkpoint the most
advanced copy's progress is given to all of them (so a job progresses as fast as its luckiest
machine). Checkpoints happen only when a job arrives or departs (the paper's Assumption 1), which
is also when the allocation may change.

An allocation, for `n` active jobs and `m` machines, is per job the number of machines it runs
on (`copies`, 0 while it waits). When the copies outnumber the machines the cluster multitasks:
every machine holds ceil(E/m) or floor(E/m) of the E copies, each an equal share of its rate
(simulator/redundancy.py places them); a job's copies are always on distinct machines.

Non-multitasking:

- `srpt`: the m jobs with the least remaining work run, one machine each; the rest wait.
- `srpt+r` (Algorithm 1): as srpt while n >= m; with fewer jobs than machines every job gets
  floor(m/n) copies and the smallest the machines left over, m - (n-1) floor(m/n).

Multitasking (jobs ordered by arrival, the latest last):

- `fair`, `fair+r` (Algorithm 2), n > m: the c m latest arrivals run, c = floor(n/m) on every
  machine, each a share 1/c; the n - c m earliest wait (with 5 jobs on 3 machines, the 3
  latest run alone and the 2 earliest wait). Fewer jobs than machines: `fair` one machine
  each, `fair+r` floor(m/n) copies each and the latest arrival the machines left over.
- `laps` (beta): only the k = ceil(beta n) latest arrivals run; while k <= m one machine each,
  beyond that one share each, the k shares spread evenly over the machines (ceil(k/m) or
  floor(k/m) on a machine), so no machine idles.
- `laps+r` (beta, Algorithm 3): the same k jobs; k <= m: floor(m/k) copies each and the latest
  the rest; k > m: every machine holds c = ceil(k/m) shares of 1/c, one for each of the k - 1
  earlier jobs and the c m - k + 1 left for the latest, on as many machines.

`fair` running every job (processor sharing among all, as these policies did before) is `laps`
with beta 1. `MACHINE_ALLOCATIONS.make(name, AllocationOptions(beta=...))`: every policy takes
the options; only laps ones read `beta`.
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
        """(copies, shared) per active job: the machines it runs on, and whether it shares
        them (every job does when the copies outnumber the machines). A job never has more
        copies than there are machines."""


# the paper's model only (`megha experiment redundancy`): the federation file's
# [policies.redundancy] chooses among copies.COPY_POLICIES
MACHINE_ALLOCATIONS: Registry[type[MachineAllocation]] = Registry(
    "redundancy experiment", argument="policy", options=AllocationOptions)


def spread(copies: np.ndarray, chosen: np.ndarray, favoured: int, machines: int) -> None:
    """Give the `chosen` jobs floor(m/k) machines each and `favoured` (one of them) the rest."""
    each, rest = shares(len(chosen), machines)
    copies[chosen] = each
    copies[favoured] = rest


def _result(copies: np.ndarray, machines: int) -> tuple[np.ndarray, np.ndarray]:
    return copies, (copies > 0) & (copies.sum() > machines)


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
        return _result(copies, machines)


@MACHINE_ALLOCATIONS.register("srpt+r")
class SrptRedundant(Srpt):
    redundant = True


class _Sharing(_Policy):
    """Fair and LAPS: the latest arrivals run; one machine each (or copies, with redundancy)
    while they fit, shares of the machines when they do not."""

    multitasking = True
    redundant = False

    def running(self, n: int, machines: int) -> int:
        """How many of the n jobs, the latest arrivals, run."""
        raise NotImplementedError

    def allocate(self, remaining, arrival, machines):
        n = len(remaining)
        copies = np.zeros(n, dtype=np.int64)
        if n == 0:
            return _result(copies, machines)
        k = self.running(n, machines)
        latest = np.argsort(arrival, kind="stable")[n - k:]  # the latest arrival last
        copies[latest] = 1
        if self.redundant and k < machines:
            spread(copies, latest, latest[-1], machines)
        elif self.redundant and k > machines:
            # the shares the k jobs leave on ceil(k/m) per machine go to the latest
            copies[latest[-1]] += machines * math.ceil(k / machines) - k
        return _result(copies, machines)


@MACHINE_ALLOCATIONS.register("fair")
class Fair(_Sharing):
    def running(self, n: int, machines: int) -> int:
        # more jobs than machines: floor(n/m) on every machine, no machine with one less, so
        # the shares are equal; the earliest n mod m wait (the paper's priority to the latest)
        return n if n <= machines else machines * (n // machines)


@MACHINE_ALLOCATIONS.register("fair+r")
class FairRedundant(Fair):
    redundant = True


@MACHINE_ALLOCATIONS.register("laps")
class Laps(_Sharing):
    def running(self, n: int, machines: int) -> int:
        # ceil(beta n), not fooled by rounding: 0.1 x 30 is 3.0000000000000004 in floats
        return max(1, math.ceil(round(self.options.beta * n, 9)))


@MACHINE_ALLOCATIONS.register("laps+r")
class LapsRedundant(Laps):
    redundant = True
