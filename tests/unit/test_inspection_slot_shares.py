"""Each user queue's mean share of the cluster's cpu (`megha inspect`, fairness) in slot mode
(`megha simulate --slots`: every node one slot of 1000 cpu_m, every task one slot) and in
resource mode: the queues of a saturated cluster hold all of it between them.

A task's demand (`task_launched`'s `cpu_m`) and the cluster's capacity (the sum of the LMs'
`lm_started` `cpu_m`) are in the same unit, millicores, in both modes: the simulator logs
the slot's cpu_m on both sides (simulator/cluster.py SLOT, common/startlog.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from inspection.analysis import RunAnalysis
from simulator.cluster import PAPER_NODE, SLOT

ROOT = Path(__file__).resolve().parents[2]
QUEUES = ("q1", "q2", "q3", "q4")


def ev(ts: float, svc: str, event: str, **fields) -> dict:
    return {"ts": ts, "svc": svc, "event": event, **fields}


def saturated_log(node_cpu_m: int, task_cpu_m: int, *, lms: int = 2,
                  nodes_per_lm: int = 2) -> list[dict]:
    """A cluster filled over [0, 10] s with tasks of `task_cpu_m`, dealt to the four queues
    in turn, as the simulator logs them (two GMs with two queues each). At 4 s q1's first
    task is preempted and q2 takes its place until 10 s."""
    events = [ev(0.0, f"gm-{g}", "gm_starting", gm=f"gm-{g}",
                 shares={q: 0.25 for q in QUEUES[2 * g - 2:2 * g]},
                 policies={"job": "fifo", "fairness": "fair_share"}) for g in (1, 2)]
    events += [ev(0.0, f"lm-{m}", "lm_started", lm=f"lm-{m}", epoch=0, recovering=False,
                  workers=[f"lm-{m}/w0"], nodes=nodes_per_lm,
                  cpu_m=nodes_per_lm * node_cpu_m, mem_mib=nodes_per_lm * 1024)
             for m in range(1, lms + 1)]
    per_node = node_cpu_m // task_cpu_m
    index = 0
    for m in range(1, lms + 1):
        for n in range(nodes_per_lm):
            for _ in range(per_node):
                user = QUEUES[index % len(QUEUES)]
                attempt, job = f"{user}j/{index}#0.1", f"{user}j"
                fields = {"attempt": attempt, "task": attempt.split("#")[0], "job": job,
                          "user": user, "lm": f"lm-{m}", "node": f"lm-{m}/n{n}"}
                events.append(ev(0.0, f"lm-{m}", "task_launched", **fields,
                                 cpu_m=task_cpu_m, mem_mib=1024))
                events.append(ev(0.0, f"lm-{m}/w0", "task_started", **fields,
                                 worker=f"lm-{m}/w0", duration=10.0))
                end = "task_preempted" if index == 0 else "task_finished"
                events.append(ev(4.0 if index == 0 else 10.0, f"lm-{m}", end, **fields))
                index += 1
    fields = {"attempt": "q2j/x#0.1", "task": "q2j/x", "job": "q2j", "user": "q2",
              "lm": "lm-1", "node": "lm-1/n0"}
    events += [ev(4.0, "lm-1", "task_launched", **fields, cpu_m=task_cpu_m, mem_mib=1024),
               ev(4.0, "lm-1/w0", "task_started", **fields, worker="lm-1/w0", duration=6.0),
               ev(10.0, "lm-1", "task_finished", **fields)]
    return events


def fairness_of(events: list[dict]) -> dict:
    run = RunAnalysis("run")
    for event in events:
        run.feed(event)
    return run.report()["fairness"]


@pytest.mark.parametrize("node, task", [(SLOT[0], SLOT[0]),  # slot mode: one task, one node
                                        (PAPER_NODE[0], 16_000)],  # resource mode: 4 a node
                         ids=["slots", "resources"])
def test_the_queues_of_a_saturated_cluster_hold_all_of_it(node, task):
    fairness = fairness_of(saturated_log(node, task))
    tasks = 2 * 2 * node // task  # 2 LMs of 2 nodes, filled
    assert fairness["capacity_cpu_m"] == 4 * node
    shares = fairness["mean_share"]
    assert set(shares) == set(QUEUES)
    assert sum(shares.values()) == pytest.approx(1.0)
    # q1 loses one task's cpu for 6 of the 10 s, and q2 gains it
    one = task / (4 * node)
    assert shares["q1"] == pytest.approx((tasks / 4) * one - 0.6 * one)
    assert shares["q2"] == pytest.approx((tasks / 4) * one + 0.6 * one)
    assert shares["q3"] == shares["q4"] == pytest.approx(0.25)
    total = np.sum([fairness["series"]["users"][q] for q in QUEUES], axis=0)
    assert total[:-1] == pytest.approx(np.ones(len(total) - 1))  # all held until 10 s
    assert total[-1] == 0.0  # the last point is the last end: nothing held after it


def test_a_simulated_slot_mode_run_s_shares_are_its_slots_held(tmp_path):
    """A small saturated slot-mode simulation: the share of each queue is the slot-seconds
    its attempts held (from their launch to the LM's end line) over the cluster's slots and
    the span, and the queues hold every slot while tasks wait."""
    path, nodes = tmp_path / "slots.log", 40
    done = subprocess.run(
        [sys.executable, "-m", "megha", "simulate", "--trace", "deploy/workloads/YH1_sub.tr",
         "--slots", "--nodes", str(nodes), "--gms", "4", "--lms", "2", "--jobs", "20",
         "--target-load", "1.5", "--log", str(path)],
        capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in path.read_text().splitlines()]
    fairness = fairness_of(events)
    assert fairness["capacity_cpu_m"] == nodes * SLOT[0]

    launched, ends, user = {}, {}, {}
    for e in events:
        if e["event"] == "task_launched":
            assert e["cpu_m"] == SLOT[0]  # one slot, in the capacity's unit
            launched[e["attempt"]], user[e["attempt"]] = e["ts"], e["user"]
        elif e["event"] in ("task_finished", "task_preempted", "task_cancelled", "task_lost",
                            "task_failed") and "worker" not in e:
            ends[e["attempt"]] = e["ts"]
    start, end = min(launched.values()), max(ends.values())
    held = Counter()
    for attempt, ts in launched.items():
        held[user[attempt]] += ends[attempt] - ts
    expected = {q: held[q] / nodes / (end - start) for q in held}
    assert fairness["mean_share"] == pytest.approx(expected)
    total = np.sum(list(fairness["series"]["users"].values()), axis=0)
    assert total.max() == pytest.approx(1.0)  # saturated: every slot held
    assert np.median(total) > 0.9
    assert sum(fairness["mean_share"].values()) > 0.5  # not a few percent between them


def test_a_queue_served_early_in_a_long_run_was_not_held_back():
    """Hand-worked, 2 one-slot nodes over [0, 20] s. q1's job of 3 tasks arrives at 0: its
    first two take both slots at 0 and end at 2, its third waits for them and runs 2-4; then
    q1 has nothing. q2's job of 4 tasks arrives at 1 and takes a slot at 4, 4, 12, 12 (each
    8 s) until 20. Over the run q1 holds 6 of the 40 slot-seconds; while it had a task
    waiting (0 to 2) it held both slots. q2 waited from 1 to 12 and held no slot over 1-4
    and both over 4-12: 16 of its 22 slot-seconds."""
    events = [ev(0.0, "lm-1", "lm_started", lm="lm-1", epoch=0, recovering=False,
                 workers=["lm-1/w0"], nodes=2, cpu_m=2 * SLOT[0], mem_mib=2 * SLOT[1])]
    events += [ev(0.0, "gm-1", "job_arrived", job="a", user="q1", arrival=0.0, tasks=3),
               ev(1.0, "gm-1", "job_arrived", job="b", user="q2", arrival=1.0, tasks=4)]
    runs = [("a", "q1", 0, 0.0, 2.0), ("a", "q1", 1, 0.0, 2.0), ("a", "q1", 2, 2.0, 4.0),
            ("b", "q2", 0, 4.0, 12.0), ("b", "q2", 1, 4.0, 12.0), ("b", "q2", 2, 12.0, 20.0),
            ("b", "q2", 3, 12.0, 20.0)]
    for job, user, index, start, end in runs:
        fields = {"attempt": f"{job}/{index}#1", "task": f"{job}/{index}", "job": job,
                  "user": user, "lm": "lm-1", "node": f"lm-1/n{index % 2}"}
        events += [ev(start, "lm-1", "task_launched", **fields, cpu_m=SLOT[0],
                      mem_mib=SLOT[1]),
                   ev(start, "lm-1/w0", "task_started", **fields, worker="lm-1/w0",
                      duration=end - start),
                   ev(end, "lm-1", "task_finished", **fields)]
    events.sort(key=lambda e: e["ts"])
    fairness = fairness_of(events)
    assert fairness["mean_share"] == pytest.approx({"q1": 6 / 40, "q2": 32 / 40})
    # q1 waited over [0, 2]: both slots; q2 over [1, 12]: 0 over 1-2 and 2-4, 2 over 4-12
    assert fairness["waiting_share"] == pytest.approx({"q1": 1.0, "q2": 16 / 22})
