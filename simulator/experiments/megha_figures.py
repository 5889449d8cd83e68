"""The Megha paper's sweeps of one setting, each a `ClusterSweep` (cluster_sweep.py):

    baselines     megha, centralized, sparrow and random on one cluster and workload
                  (default: YH1_sub on 10,000 nodes, 4 GMs, 25 LMs, slot mode)
    cluster-size  megha on 1,000 to 50,000 nodes (default 10 GMs, 10 LMs, as the paper; the
                  cloudera stand-in)
    gms-lms       megha with other numbers of GMs and LMs (default on 30,000 nodes, the
                  alibaba stand-in, as the paper's Figure 9)
    heartbeat     megha with other LM heartbeat intervals (YH1_sub on 10,000 nodes)

Figure 8 (cluster size) names no workload: cloudera's stand-in (YH1_sub's jobs at their own
rate) keeps its 1,000-node end from saturating, which would hide the figure's subject, the
cost of a larger global state.
"""

from __future__ import annotations

from collections.abc import Callable

from common.errors import InvalidInput
from simulator.command import SCHEDULERS
from simulator.experiments.cluster_sweep import ClusterSweep
from simulator.experiments.registry import EXPERIMENTS


def _each(what: str, name: str,
          change: Callable[[str], tuple[str, dict]]) -> Callable[[tuple[str, ...]], list]:
    """The plan that makes one run of each value with `change`, which raises ValueError on a
    bad one."""

    def plan(values: tuple[str, ...]) -> list[tuple[str, dict]]:
        runs = []
        for value in values:
            try:
                runs.append(change(value))
            except ValueError:
                raise InvalidInput("--values", f"{value!r} is not one of the {what} {name} "
                                               f"sweeps") from None
        return runs

    return plan


def _scheduler(value: str) -> tuple[str, dict]:
    if value not in SCHEDULERS:
        raise ValueError(value)
    return value, {"scheduler": value}


def _node_count(value: str) -> tuple[str, dict]:
    return f"{int(value)}-nodes", {"nodes": int(value)}


def _gms_lms(value: str) -> tuple[str, dict]:
    gms, lms = (int(part) for part in value.lower().split("x"))
    return f"{gms}gm-{lms}lm", {"gms": gms, "lms": lms}


def _heartbeat(value: str) -> tuple[str, dict]:
    return f"heartbeat-{float(value):g}s", {"heartbeat": float(value)}


EXPERIMENTS.register(ClusterSweep(
    name="baselines",
    summary="megha, centralized, sparrow and random on one cluster and workload (the Megha "
            "paper's Figures 3 and 4)",
    swept="schedulers", default_values="megha,centralized,sparrow,random",
    plan=_each("schedulers", "baselines", _scheduler),
    defaults={"nodes": 10_000, "gms": 4, "lms": 25}, sets=frozenset({"scheduler"})))
EXPERIMENTS.register(ClusterSweep(
    name="cluster-size",
    summary="megha on 1,000 to 50,000 nodes with 10 GMs and 10 LMs (Figure 8)",
    swept="node counts", default_values="1000,5000,10000,20000,50000",
    plan=_each("node counts", "cluster-size", _node_count),
    defaults={"gms": 10, "lms": 10}, sets=frozenset({"nodes"}), workload="cloudera"))
EXPERIMENTS.register(ClusterSweep(
    name="gms-lms",
    summary="megha with other numbers of GMs and LMs on 30,000 nodes (Figure 9)",
    swept="GxL pairs", default_values="1x10,5x10,10x10,10x5,10x20",
    plan=_each("GxL pairs", "gms-lms", _gms_lms),
    defaults={"nodes": 30_000}, sets=frozenset({"gms", "lms"}), workload="alibaba"))
EXPERIMENTS.register(ClusterSweep(
    name="heartbeat",
    summary="megha with other LM heartbeat intervals",
    swept="intervals in seconds", default_values="1,5,10,30",
    plan=_each("intervals in seconds", "heartbeat", _heartbeat),
    defaults={"nodes": 10_000, "gms": 4, "lms": 25}, sets=frozenset({"heartbeat"})))
