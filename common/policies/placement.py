"""Placement policies: which of the nodes a task fits on it goes to, registered by name.

The cluster state narrows a task's nodes down with bit-vectors (its constraints, the GM's
partition, availability: `ClusterState.find`); the policy scans what is left, comparing exact
free resources, and picks one.

- `first_fit`: Megha's matching. The first fitting node at or after `start`, wrapping around:
  the GM starts at the next LM's first node, round-robin across LMs.
- `best_fit`: the fitting node the task leaves the least room on (normalised cpu plus memory
  left over), wherever it is: packs tighter, scans every candidate.
- `tetris`: the packing paper's Tetris baseline, Tetris's alignment score: the fitting node
  whose free resources best line up with the task's demand (the sum over cpu and memory of
  demand times free room, each a share of the node's capacity), so that a task goes where its
  kind of room is plentiful; scans every candidate. Tetris's other term, a job's weight over
  its remaining volume, is the job policy's (`psrs` orders by it); placement sets stay strict
  in a GM, so its remote penalty has nothing to weigh.

`PLACEMENT_POLICIES.make(name)` passes no context and the family's options, which are empty
(`PlacementOptions`): a placement policy keeps no state and has no settings, but is made the
way every policy is, so one that needs some adds its fields there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from bitarray import bitarray

from common.policies.registry import Registry

if TYPE_CHECKING:  # the cluster state imports the default policy from here
    from common.cluster import ClusterState


@dataclass(frozen=True, slots=True)
class PlacementOptions:
    """The placement policies' options: none yet."""


class PlacementPolicy(Protocol):
    """Picks the node a task goes to among those it may use."""

    name: str
    options: PlacementOptions

    def choose(
        self, state: ClusterState, candidates: bitarray, cpu_m: int, mem_mib: int, start: int
    ) -> int:
        """Index of a `candidates` node (set bits) with `cpu_m` and `mem_mib` free in
        `state`, or -1 if none has; `start` is where a scan that has an order begins."""


PLACEMENT_POLICIES: Registry[type[PlacementPolicy]] = Registry(
    "policies.placement", options=PlacementOptions, argument="placement")


class _Placement:
    def __init__(self, options: PlacementOptions = PlacementOptions()) -> None:
        self.options = options


@PLACEMENT_POLICIES.register("first_fit")
class FirstFit(_Placement):
    def choose(
        self, state: ClusterState, candidates: bitarray, cpu_m: int, mem_mib: int, start: int
    ) -> int:
        free_cpu, free_mem = state.free_cpu, state.free_mem
        for i in candidates.search(1, start):
            if free_cpu[i] >= cpu_m and free_mem[i] >= mem_mib:
                return i
        if start:
            for i in candidates.search(1, 0, start):
                if free_cpu[i] >= cpu_m and free_mem[i] >= mem_mib:
                    return i
        return -1


@PLACEMENT_POLICIES.register("best_fit")
class BestFit(_Placement):
    def choose(
        self, state: ClusterState, candidates: bitarray, cpu_m: int, mem_mib: int, start: int
    ) -> int:
        free_cpu, free_mem = state.free_cpu, state.free_mem
        cap_cpu, cap_mem = state.topology.cap_cpu, state.topology.cap_mem
        best, best_left = -1, float("inf")
        for i in candidates.search(1):
            if free_cpu[i] >= cpu_m and free_mem[i] >= mem_mib:
                left = (free_cpu[i] - cpu_m) / cap_cpu[i] + (free_mem[i] - mem_mib) / cap_mem[i]
                if left < best_left:
                    best, best_left = i, left
        return best


@PLACEMENT_POLICIES.register("tetris")
class TetrisAlignment(_Placement):
    def choose(
        self, state: ClusterState, candidates: bitarray, cpu_m: int, mem_mib: int, start: int
    ) -> int:
        free_cpu, free_mem = state.free_cpu, state.free_mem
        cap_cpu, cap_mem = state.topology.cap_cpu, state.topology.cap_mem
        best, best_score = -1, -1.0
        for i in candidates.search(1):
            if free_cpu[i] >= cpu_m and free_mem[i] >= mem_mib:
                score = (cpu_m * free_cpu[i] / (cap_cpu[i] * cap_cpu[i])
                         + mem_mib * free_mem[i] / (cap_mem[i] * cap_mem[i]))
                if score > best_score:
                    best, best_score = i, score
        return best


# What a search without a policy uses: Megha's own matching.
FIRST_FIT = FirstFit()
