"""The model of time fitted from event logs (twin/fit.py) and its file (simulator/timemodel.py):
a known delay per hop and known costs are recovered within 5%, from hand-made lines and from
a simulation run under a model set by hand; the file is read back the same, and a file or log
that cannot give a model is refused with what is wrong."""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path

import pytest

from common.errors import InvalidInput
from common.routing import ROUTES, Receiver
from simulator.cluster import shaped_federation
from simulator.eventlog import SimLog
from simulator.federated import FederatedSimulation, job_specs
from simulator.processing import CALIBRATED
from simulator.timemodel import HOP_OF, HOPS, VERSION, HopDelay, TimeModel
from twin.fit import fit, fit_hop, observe

US = 1e-6
KNOWN_DELAYS = {"submit": 0.004, "gm_to_lm": 0.0021, "lm_reply": 0.0013, "lm_to_worker": 0.0032,
                "worker_to_lm": 0.011, "task_event": 0.0065, "heartbeat": 0.0065}


def close(value: float, expected: float, tolerance: float = 0.05) -> bool:
    return abs(value - expected) <= tolerance * expected


def hand_made_log(n: int = 60, gm_decision: float = 20 * US, gm_event: float = 30 * US,
                  lm_item: float = 9 * US, lm_event: float = 15 * US,
                  worker: float = 40 * US, per_item: float = 0.0002) -> list[dict]:
    """One job of one task at a time through GM, LM and worker, with the delays of
    KNOWN_DELAYS (gm_to_lm and lm_reply growing by `per_item` a placement) and costs that
    grow with what each step did."""
    rng = random.Random(1)
    lines = []
    t = 100.0
    for j in range(n):
        width = 1 + j % 4  # batches of 1 to 4 placements
        arrival = t
        gm_start = arrival + KNOWN_DELAYS["submit"]
        gm_h = gm_event + width * gm_decision + 50 * US  # + the job's admission
        gm_end = gm_start + gm_h
        job, request = f"j{j}", f"r{j}"
        lines.append({"ts": gm_end, "svc": "gm-1", "event": "job_arrived", "job": job,
                      "arrival": arrival, "handle_s": gm_h})
        attempts = [f"{job}/{i}#1" for i in range(width)]
        for a in attempts:
            lines.append({"ts": gm_end, "svc": "gm-1", "event": "task_placed", "attempt": a,
                          "request": request, "handle_s": gm_h})
        lines.append({"ts": gm_end, "svc": "gm-1", "event": "request_sent", "request": request,
                      "items": width, "handle_s": gm_h})
        lm_start = gm_end + KNOWN_DELAYS["gm_to_lm"] + per_item * width
        lm_h = lm_event + width * lm_item
        lm_end = lm_start + lm_h
        for a in attempts:
            lines.append({"ts": lm_end, "svc": "lm-1", "event": "task_launched", "attempt": a,
                          "handle_s": lm_h})
        answer_start = lm_end + KNOWN_DELAYS["lm_reply"] + per_item * width
        answer_h = gm_event + 3 * US + width * 2 * US
        lines.append({"ts": answer_start + answer_h, "svc": "gm-1", "event": "request_answered",
                      "request": request, "items": width, "handle_s": answer_h})
        for i, a in enumerate(attempts):
            w_start = lm_end + KNOWN_DELAYS["lm_to_worker"] + i * 1e-5
            w_end = w_start + worker
            lines.append({"ts": w_end, "svc": "lm-1/w0", "event": "task_started", "attempt": a,
                          "worker": "lm-1/w0", "handle_s": worker})
            done = w_end + 1.0 + rng.random()
            lines.append({"ts": done, "svc": "lm-1/w0", "event": "task_finished", "attempt": a,
                          "worker": "lm-1/w0", "handle_s": worker})
            report_start = done + KNOWN_DELAYS["worker_to_lm"]
            report_end = report_start + lm_event + 4 * US
            lines.append({"ts": report_end, "svc": "lm-1", "event": "task_finished",
                          "attempt": a, "handle_s": lm_event + 4 * US})
            gm_done_start = report_end + KNOWN_DELAYS["task_event"]
            gm_done_h = gm_event + 6 * US
            lines.append({"ts": gm_done_start + gm_done_h, "svc": "gm-1", "event": "task_done",
                          "attempt": a, "handle_s": gm_done_h})
        t += 5.0
    rng.shuffle(lines)  # a reader must not depend on the order of the lines
    return lines


def test_known_delays_and_costs_are_recovered_from_hand_made_lines():
    model = fit(hand_made_log())
    for hop in ("submit", "lm_to_worker", "worker_to_lm", "task_event"):
        assert close(model.hops[hop].at(0.5), KNOWN_DELAYS[hop]), (hop, model.hops[hop])
    for hop in ("gm_to_lm", "lm_reply"):  # the constant part, and the slope per placement
        assert close(model.hops[hop].at(0.5, items=0), KNOWN_DELAYS[hop]), hop
        assert close(model.hops[hop].per_item, 0.0002), model.hops[hop].per_item
    costs = model.costs
    # every timed GM step here admitted a job, applied a task event or took an answer, so
    # the GM's fixed cost per step is told only within each kind's: their totals are exact
    assert close(costs.gm_decision, 20 * US) and close(costs.gm_reply_result, 2 * US)
    assert close(costs.gm_event + costs.gm_job, 80 * US)
    assert close(costs.gm_event + costs.gm_task_event, 36 * US)
    assert close(costs.gm_event + costs.gm_snapshot, 33 * US)
    assert close(costs.lm_item, 9 * US) and close(costs.lm_event, 15 * US)
    assert close(costs.lm_report, 4 * US)
    assert close(costs.worker_event, 40 * US)
    assert close(model.hops["heartbeat"].at(0.5), KNOWN_DELAYS["task_event"])
    assert model.source["samples"]["lm_to_worker"] == sum(1 + j % 4 for j in range(60))


def test_a_simulation_under_a_known_model_gives_that_model_back(tmp_path: Path):
    known = TimeModel({hop: HopDelay.constant(d) for hop, d in KNOWN_DELAYS.items()},
                      dataclasses.replace(CALIBRATED, gm_decision=12 * US, lm_item=8 * US,
                                          gm_node_viewed=0.0, gm_running_listed=0.0))
    federation = shaped_federation(200, 2, 2, slots=True, heartbeat_interval=1.0)
    from loadgen.workload import ReplayJob, ReplayTask
    jobs = [ReplayJob(f"j{k}", f"q{1 + k % 2}", 0.5 * k,
                      (ReplayTask(1000, 1024, 0.5 + 0.1 * (k % 5)),) * (1 + k % 7))
            for k in range(80)]
    path = tmp_path / "sim.log"
    log = SimLog("known", path)
    sim = FederatedSimulation(federation, job_specs(jobs, (1000, 1024)), log,
                              processing="model", time_model=known, seed=3)
    sim.run()
    log.close()
    sim.check_invariants()
    events = [json.loads(line) for line in path.read_text().splitlines()]
    model = fit(events)
    for hop in ("submit", "lm_to_worker", "worker_to_lm", "task_event"):
        assert close(model.hops[hop].at(0.5), KNOWN_DELAYS[hop]), (hop, model.hops[hop])
    for hop in ("gm_to_lm", "lm_reply"):
        assert close(model.hops[hop].at(0.5, items=1), KNOWN_DELAYS[hop], 0.1), hop
    assert close(model.costs.gm_decision, 12 * US)
    assert close(model.costs.lm_item, 8 * US)


def test_every_message_between_cores_has_a_hop():
    for kind, route in ROUTES.items():
        if route.to is not Receiver.SELF:
            assert kind in HOP_OF, kind.__name__
    assert set(HOP_OF.values()) <= set(HOPS)


def test_the_file_reads_back_as_written_and_refuses_what_it_cannot_use(tmp_path: Path):
    model = fit(hand_made_log())
    path = tmp_path / "model.json"
    model.save(path)
    again = TimeModel.load(path)
    assert again.to_json() == model.to_json()
    data = json.loads(path.read_text())
    for broken, words in (({**data, "version": VERSION + 1}, "version"),
                          ({**data, "format": "x"}, "not a time model"),
                          ({**data, "hops": {k: v for k, v in data["hops"].items()
                                             if k != "lm_reply"}}, "lm_reply"),
                          ({**data, "costs": {**data["costs"], "gm_decison": 1e-6}},
                           "gm_decison"),
                          ({**data, "costs": {**data["costs"], "gm_decision": -1}},
                           "gm_decision")):
        path.write_text(json.dumps(broken))
        with pytest.raises(InvalidInput, match=words):
            TimeModel.load(path)
    path.write_text("{not json")
    with pytest.raises(InvalidInput, match="not JSON"):
        TimeModel.load(path)
    with pytest.raises(InvalidInput, match="cannot read"):
        TimeModel.load(tmp_path / "missing.json")


def test_a_log_without_the_hops_it_needs_is_refused_by_name():
    lines = [e for e in hand_made_log() if e["event"] != "request_answered"]
    with pytest.raises(InvalidInput, match="lm_reply"):
        fit(lines)
    no_handles = [{k: v for k, v in e.items() if k != "handle_s"} for e in hand_made_log()]
    with pytest.raises(InvalidInput, match="too few"):
        fit(no_handles)
    with pytest.raises(InvalidInput, match="no scheduling events"):
        fit([{"ts": 1.0, "svc": "x", "event": "log"}])


def test_a_hop_delay_is_drawn_from_its_quantiles():
    hop = fit_hop([(0.001 * k, 1) for k in range(1, 101)])
    rng = random.Random(0)
    draws = sorted(hop.sampler(rng)() for _ in range(4000))
    assert close(draws[2000], hop.at(0.5), 0.05)
    assert hop.quantiles[0] >= 0.0 and draws[0] >= hop.quantiles[0]
    assert observe([]).lines == 0


def test_an_outbox_batches_what_is_sent_while_a_batch_waits_and_paces_the_next():
    """lm_to_worker leaves through an outbox: one batch in flight, the next no sooner than
    the pace after the last left; a message sent while a batch waits joins it."""
    from common.commands import SendLaunch, StartOnWorker
    from simulator.timemodel import CalibratedNetwork

    hops = {hop: HopDelay.constant(0.001) for hop in HOPS}
    hops["lm_to_worker"] = HopDelay.constant(0.004)
    network = CalibratedNetwork(TimeModel(hops, CALIBRATED), random.Random(0),
                                {"worker_launch_pace": 0.02, "report_pace": 0.1,
                                 "task_event_pace": 0.05})
    start = network.for_kind(StartOnWorker)
    assert start("lm-1", "w0", 1.0, None) == pytest.approx(1.004)  # idle: leaves at once
    assert start("lm-1", "w0", 1.0, None) == pytest.approx(1.004)  # same step: same batch
    assert start("lm-1", "w0", 1.005, None) == pytest.approx(1.024)  # paced: leaves at 1.02
    assert start("lm-1", "w0", 1.010, None) == pytest.approx(1.024)  # joins the waiting one
    assert start("lm-1", "w1", 1.005, None) == pytest.approx(1.009)  # another channel
    assert start("lm-1", "w0", 1.5, None) == pytest.approx(1.504)  # idle again
    launch = network.for_kind(SendLaunch)  # a direct hop: each its own draw, no outbox
    assert launch("gm-1", "lm-1", 2.0, SendLaunch("lm-1", "r", None, ())) == pytest.approx(2.001)


def test_the_overhead_per_message_and_per_event_is_told_apart_by_windows_of_other_mixes():
    """Windows where a message carries few events and windows where it carries many: the
    fit finds the CPU outside the core per message and per event, and leaves the seconds'
    (timers) aside."""
    from twin.services import ServicesRun

    per_message, per_event, per_second = 0.002, 0.0003, 0.01
    rows = []
    for seconds, messages, events in ((3, 2, 12), (2, 40, 60), (2, 30, 400), (2, 10, 900),
                                      (2, 80, 100)):
        outside = per_second * seconds + per_message * messages + per_event * events
        rows.append([seconds, outside + 0.1 * events * 1e-4, 0.1 * events * 1e-4, messages,
                     events])  # cpu, of which the core's handle
    run = ServicesRun(Path("/x"), 2, 10.0, 1.0, 0.0, 5, 0, 0,
                      busy={"w0": {"role": "worker"}, "w1": {"role": "worker"}},
                      windows={"w0": rows, "w1": rows})
    message, event = run.overheads()["worker"]
    assert close(message, per_message) and close(event, per_event)
    assert "gm" not in run.overheads()  # no GM measured: the model keeps 0


def test_a_message_counts_as_idle_only_after_two_quiet_paces():
    from twin.fit import idle

    pace = 0.1
    samples = [(0.002, 1, "w0", 0.0), (0.002, 1, "w0", 0.05),  # within a pace: not idle
               (0.002, 1, "w0", 0.5),  # quiet since 0.052: idle
               (0.002, 1, "w0", 1.0)]  # a start report went at 0.9: not idle
    quiet = idle(samples, pace, {"w0": [0.9]})
    assert [m[3] for m in quiet] == [0.5]
