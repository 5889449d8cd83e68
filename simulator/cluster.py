"""Simulated federations: a federation file as the testbed uses it, or a shape (nodes, GMs,
LMs) generated into the same `Federation` the services build from their file.

A shape gets one user queue per GM (`q1` on gm-1, ...) with equal shares, LMs of equal size
(the remainder spread over the first ones), worker agents of `nodes_per_worker` nodes and
machine-constraint profile A (common/federation.py), or another `profile`: "random" draws A,
B or C per LM from the seed, as the Megha paper draws a profile per cluster. In slot mode every
node has exactly one `SLOT` of capacity and every task asks for one, as in the Sparrow and
Megha simulators.
"""

from __future__ import annotations

import json
import math

from common.errors import InvalidInput
from common.federation import Federation, load_federation

SLOT = (1000, 1024)  # (cpu_m, mem_mib): one slot, one task
PAPER_NODE = (64_000, 16_384)  # the Megha paper's simulated nodes: 64 cores, 16 GB


def shaped_federation(nodes: int, gms: int, lms: int, **options) -> Federation:
    """The federation of a shape (options: those of `shaped_federation_text`)."""
    return load_federation(shaped_federation_text(nodes, gms, lms, **options),
                           f"<{nodes} nodes, {gms} GMs, {lms} LMs>")


def shaped_federation_text(nodes: int, gms: int, lms: int, *, slots: bool = False,
                           node: tuple[int, int] = PAPER_NODE, nodes_per_worker: int = 100,
                           heartbeat_interval: float = 1.0, policies: dict | None = None,
                           seed: int = 0, profile: str = "A") -> str:
    """A shape as a federation file's text: what the services read (`megha twin` runs them
    on one)."""
    for name, value, least in (("--nodes", nodes, 1), ("--gms", gms, 1), ("--lms", lms, 1),
                               ("--nodes-per-worker", nodes_per_worker, 1)):
        if value < least:
            raise InvalidInput(name, f"must be at least {least}, got {value}")
    if lms > nodes:
        raise InvalidInput("--lms", f"{lms} LMs need at least as many nodes, got {nodes}")
    if not (math.isfinite(heartbeat_interval) and heartbeat_interval > 0):
        raise InvalidInput("--heartbeat", f"must be positive, got {heartbeat_interval}")
    cpu_m, mem_mib = SLOT if slots else node
    lines = [f"seed = {seed}", f"gms = {_toml([f'gm-{g}' for g in range(1, gms + 1)])}",
             "", "[timing]", f"heartbeat_interval = {heartbeat_interval!r}",
             f"lm_timeout = {heartbeat_interval * 3 + 1.0!r}",
             f"attempt_grace = {heartbeat_interval * 3 + 1.0!r}", "", "[policies]"]
    for key, value in (policies or {}).items():
        lines.append(f"{key} = {_toml(value)}")
    for g in range(1, gms + 1):
        lines += ["", "[[queues]]", f'name = "q{g}"', f"share = {1 / gms!r}", f'gm = "gm-{g}"']
    base, extra = divmod(nodes, lms)
    for number in range(1, lms + 1):
        count = base + (1 if number <= extra else 0)
        workers = max(1, math.ceil(count / nodes_per_worker))
        lines += ["", "[[lms]]", f'id = "lm-{number}"',
                  f"nodes = {{ count = {count}, cpu_m = {cpu_m}, mem_mib = {mem_mib}, "
                  f"workers = {workers}, profile = {_toml(profile)} }}"]
    return "\n".join(lines) + "\n"


def _toml(value) -> str:
    """A TOML value: strings and lists as JSON writes them, booleans in lower case."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | list):
        return json.dumps(value)
    return repr(value)
