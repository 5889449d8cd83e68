"""What every driver of the core logs the same way, so `megha inspect` reads a testbed and a
simulation alike (docs/architecture.md, The event log): the first line of a GM and of an LM,
and which events carry `handle_s`, the core's time on the event that produced them.

Timestamps are taken when a core has returned; with `handle_s` on the placement (GM), launch
(LM) and receipt or start (worker), they split a task's allocation time into queuing,
processing and communication (inspection/analysis.py).
"""

from __future__ import annotations

import dataclasses

from common.federation import Federation

TIMED_EVENTS = frozenset({"task_placed", "task_launched", "task_queued", "task_started"})
# Lines that carry `handle_s` too, so that a step's start (`ts - handle_s`) is known wherever a
# message is received or sent: the anchors the twin's calibration measures each hop between
# (twin/fit.py). Every line of one step has the same `ts`.
HANDLED_EVENTS = TIMED_EVENTS | frozenset({
    "job_arrived", "request_sent", "request_answered", "launch_refused", "task_finished",
    "task_done",
    # the LP order's solves: the core reads no clock, the driver says what the step took
    "jobs_reordered"})


def gm_starting(federation: Federation, gm: str, epoch: int) -> dict:
    """The fields of `gm_starting`: its queues' configured shares and the policies."""
    policies = federation.policies
    return {"gm": gm, "epoch": epoch,
            "users": sorted(q.name for q in federation.queues if q.gm == gm),
            "shares": {q.name: q.share for q in federation.queues if q.gm == gm},
            "policies": {"job": policies.job, "fairness": policies.fairness,
                         "placement": policies.placement, "local_queue": policies.local_queue},
            # how Algorithm 2 is carried out: a log says which variant made its shares
            "fairness_options": dataclasses.asdict(
                policies.fairness_options.resolve(policies.fairness)),
            } | variability(federation)


def variability(federation: Federation) -> dict:
    """How nodes' speeds vary, when they do (the model and the seed its streams come from)."""
    model = federation.variability.speed_model()
    return {} if model is None else {"variability": model.describe(),
                                     "variability_seed": federation.seed}


def lm_capacity(federation: Federation, lm: str) -> dict:
    """The capacity fields of `lm_started`: what user queues' shares are measured against."""
    nodes = federation.lm(lm).nodes
    return {"nodes": len(nodes), "cpu_m": sum(node.capacity.cpu_m for node in nodes),
            "mem_mib": sum(node.capacity.mem_mib for node in nodes)}
