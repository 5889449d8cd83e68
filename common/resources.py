"""Logical resources of nodes and tasks: cpu in millicores, memory in MiB.

A fixed pair keeps the hot paths (fit checks over thousands of nodes) to two integer
comparisons; another kind is added by adding a field here and a column in `ClusterState`.
"""

from __future__ import annotations

from dataclasses import dataclass

from common.errors import InvalidInput


@dataclass(frozen=True, slots=True)
class Resources:
    cpu_m: int
    mem_mib: int

    def fits_in(self, other: Resources) -> bool:
        return self.cpu_m <= other.cpu_m and self.mem_mib <= other.mem_mib

    def __add__(self, other: Resources) -> Resources:
        return Resources(self.cpu_m + other.cpu_m, self.mem_mib + other.mem_mib)

    def __sub__(self, other: Resources) -> Resources:
        return Resources(self.cpu_m - other.cpu_m, self.mem_mib - other.mem_mib)

    def validate_demand(self, field: str) -> None:
        """A task's demand must be positive in every kind (a zero-cpu task would never block)."""
        for kind in ("cpu_m", "mem_mib"):
            value = getattr(self, kind)
            if not isinstance(value, int) or isinstance(value, bool):
                raise InvalidInput(f"{field}.{kind}", f"must be an integer, got {value!r}")
            if value <= 0:
                raise InvalidInput(f"{field}.{kind}", f"must be positive, got {value}")


ZERO = Resources(0, 0)
