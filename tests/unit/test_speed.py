"""Machine service variability in the federated cluster: a node's speed process
(common/speed.py NodeSpeed), the federation file's [variability], the worker agent's runs, and
a simulation that stays repeatable with it."""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
from itertools import accumulate
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from one_gm_federation import one_gm_file

from common.errors import InvalidInput
from common.events import TaskAssigned
from common.federation import load_federation
from common.messages import Placement
from common.models import NodeSpec, TaskSpec
from common.resources import Resources
from common.speed import NodeSpeed, SpeedModel
from common.worker import WorkerAgent
from inspection.command import analyse
from loadgen.paper_workloads import YH1_SUB

ROOT = Path(__file__).resolve().parents[2]


def test_work_is_integrated_over_the_node_s_rate_periods() -> None:
    node = NodeSpeed(SpeedModel(), "hand")
    # periods [0, 10) at 1, [10, 15) stopped, [15, 30) at 2, then drawn as needed
    node._starts, node._ends, node._rates = [0.0, 10.0, 15.0], [10.0, 15.0, 30.0], [1.0, 0.0, 2.0]
    node._done, node._works = [0.0, 10.0, 10.0], [10.0, 0.0, 30.0]
    assert [node.work_until(t) for t in (4.0, 12.0, 16.0)] == [4.0, 10.0, 12.0]
    assert node.time_to_do(0.0, 4.0) == 4.0
    assert node.time_to_do(8.0, 4.0) == pytest.approx(2 + 5 + 1)  # 2 done, stopped 5, 2 at x2
    assert node.time_to_do(12.0, 10.0) == pytest.approx(3 + 5)  # waits out the stop
    assert NodeSpeed(SpeedModel(kind="constant"), "c").time_to_do(5.0, 7.0) == 7.0
    assert NodeSpeed(SpeedModel(kind="constant"), "c").work_until(5.0) == 5.0


@pytest.mark.timeout(5)
@pytest.mark.parametrize("kind", ["two-state", "gamma"])
def test_a_node_on_a_services_wall_clock_starts_its_process_where_it_is_first_asked(kind):
    """The services' clock is the wall clock: periods drawn from time 0 would take a hundred
    million draws to reach it (the testbed's workers hung on their first task)."""
    node = NodeSpeed(SpeedModel(kind=kind), "wall")
    took = node.time_to_do(1.7e9, 20.0)
    assert 0 < took < math.inf
    assert node.work_until(1.7e9 + took) - node.work_until(1.7e9) == pytest.approx(20.0)


@pytest.mark.parametrize("kind", ["two-state", "gamma"])
def test_the_work_a_run_does_is_the_work_it_was_given(kind: str) -> None:
    """`work_until` and `time_to_do` read the same periods: a run of work w started at s
    and lasting `time_to_do(s, w)` did exactly w by `work_until`, across period trims."""
    node, rng, t = NodeSpeed(SpeedModel(kind=kind), "runs"), random.Random(2), 0.0
    for _ in range(3000):
        t += rng.uniform(0, 5)
        before, work = node.work_until(t), rng.uniform(0.1, 50)
        took = node.time_to_do(t, work)
        assert node.work_until(t + took) - before == pytest.approx(work)


def walked(periods: list[tuple[float, float]], start: float, work: float) -> float:
    """`time_to_do` as first written: period by period from `start`, on periods given as
    (end, rate) from time 0; the reference the binary search must match to the bit."""
    t, left = start, work
    for end, rate in periods:
        if end <= t:
            continue
        if rate > 0 and left <= rate * (end - t):
            return t + left / rate - start
        left -= rate * (end - t)
        t = end
    raise AssertionError("the periods ran out")


def hand_node(periods: list[tuple[float, float]]) -> NodeSpeed:
    """A node whose periods are `periods` (then drawn as its model does), from time 0."""
    node = NodeSpeed(SpeedModel(), "hand")
    node._origin, t = 0.0, 0.0
    for length, rate in periods:
        done = node._done[-1] + node._works[-1] if node._done else 0.0
        end = t + length
        node._starts.append(t), node._ends.append(end), node._rates.append(rate)
        node._done.append(done), node._works.append(rate * (end - t))
        t = end
    return node


PERIOD = st.tuples(st.floats(1e-3, 50), st.one_of(st.just(0.0), st.floats(1e-3, 3)))


@settings(max_examples=300, deadline=None)
@given(st.lists(PERIOD, min_size=1, max_size=400), st.data())
def test_time_to_do_is_the_period_by_period_walk_to_the_bit(periods, data) -> None:
    """Jumping over whole periods by their running totals lands where the walk would have,
    with the walk's own `left`: the answers are equal floats, not merely close, for starts in
    order on one node (its trims and its `_first` included)."""
    total = sum(length for length, _ in periods)
    total_work = sum(length * rate for length, rate in periods)
    periods = [*periods, (1e7, 1.0)]  # a last long one, where any run ends: walked() stops
    node = hand_node(periods)
    starts = sorted(data.draw(st.lists(st.floats(0, total), min_size=1, max_size=8)))
    for start in starts:
        work = data.draw(st.floats(0, total_work + 10))
        ends = accumulate(length for length, _ in periods)  # as hand_node adds them
        assert node.time_to_do(start, work) == walked(
            list(zip(ends, (rate for _, rate in periods), strict=True)), start, work)


@pytest.mark.parametrize("kind", ["two-state", "gamma"])
def test_long_tasks_on_a_drawn_node_match_the_walk_and_its_lists_stay_short(kind) -> None:
    """Long tasks over drawn periods (hundreds crossed each) equal the walk over the same
    periods, and the periods a node keeps stay bounded as its clock moves on (trims)."""
    node, rng, t, asked = NodeSpeed(SpeedModel(kind=kind), "long"), random.Random(5), 0.0, []
    node.work_until(0.0)  # its origin at 0, as the fresh node's below
    for _ in range(400):
        t += rng.choice([rng.uniform(0, 200), rng.uniform(0, 5000)])  # far: drawn to reach
        work = rng.choice([rng.uniform(0, 3), rng.uniform(1000, 8000)])
        asked.append((t, work, node.time_to_do(t, work)))
        # 1000 before the trim, plus the periods the longest run reaches ahead
        assert len(node._works) == len(node._ends) == len(node._done) < 1000 + 2000
    fresh = NodeSpeed(SpeedModel(kind=kind), "long")  # the same periods, all kept
    fresh.work_until(0.0), fresh.work_until(max(start + took for start, _, took in asked))
    periods = list(zip(fresh._ends, fresh._rates, strict=True))
    for start, work, took in asked:
        assert took == walked(periods, start, work)


@pytest.mark.parametrize("model", [SpeedModel(), SpeedModel(kind="gamma", shape=3, interval=4)])
def test_a_node_s_long_run_rate_is_one_and_its_seed_fixes_it(model) -> None:
    def run(seed: str) -> list[float]:
        node, t, took = NodeSpeed(model, seed), 0.0, []
        for _ in range(5000):
            took.append(node.time_to_do(t, 10.0))
            t += took[-1]
        return took

    took = run("s/n1")
    assert 5000 * 10.0 / sum(took) == pytest.approx(1.0, abs=0.06)
    assert min(took) < 10.0 < max(took)  # faster and slower than nominal
    assert run("s/n1") == took and run("s/n2") != took


def speed_file(variability: str) -> str:
    return one_gm_file(f"seed = 4\n{variability}")


def test_the_federation_file_chooses_a_speed_model_and_refuses_bad_ones() -> None:
    assert load_federation(speed_file("")).variability.speed_model() is None
    federation = load_federation(speed_file(
        variability='[variability]\nmodel = "gamma"\nshape = 4.0\ninterval = 30.0\n'))
    model = federation.variability.speed_model()
    assert (model.kind, model.shape, model.interval) == ("gamma", 4.0, 30.0)
    for table, field in (('model = "fast"', "variability.model"),
                         ('model = "two-state"\nup_rate = [0.5, 0.1]', "variability.up_rate"),
                         ('model = "two-state"\nap_length = [1.0]', "variability.ap_length")):
        with pytest.raises(InvalidInput) as caught:
            load_federation(speed_file(f"[variability]\n{table}\n"))
        assert caught.value.field == field, caught.value


def test_a_varying_worker_runs_a_task_for_what_its_node_takes() -> None:
    node = NodeSpec("l1/n0", "l1", "l1/w0", Resources(1000, 1024), frozenset())
    task = TaskSpec("j/0", "j", Resources(1000, 1024), frozenset(), 50.0)
    placement = Placement("j/0#0.1", task, "l1/n0", "g1", "a", 0.0, False)
    runs = {}
    for speed in (None, SpeedModel()):
        worker = WorkerAgent("l1/w0", [node], speed=speed, speed_seed=4)
        commands = worker.handle(TaskAssigned("s", placement), 0.0)
        [run] = [c for c in commands if type(c).__name__ == "RunTask"]
        [log] = [c for c in commands if type(c).__name__ == "Log"
                 and c.event == "task_started"]
        runs[speed is None] = (run.duration, log.fields)
    assert runs[True][0] == 50.0 and "run_for" not in runs[True][1]
    expected = NodeSpeed(SpeedModel(), "4/l1/n0").time_to_do(0.0, 50.0)
    assert runs[False][0] == expected != 50.0
    assert runs[False][1]["run_for"] == expected and runs[False][1]["duration"] == 50.0


def test_a_simulation_with_variability_repeats_its_bytes_and_logs_its_model(tmp_path) -> None:
    logs = []
    for name in ("a", "b"):
        log = tmp_path / f"{name}.log"
        done = subprocess.run(
            [sys.executable, "-m", "megha", "simulate", "--nodes", "60", "--gms", "2", "--lms",
             "2", "--slots", "--trace", str(YH1_SUB), "--jobs", "25",
             "--duration-scale", "0.01", "--variability", "two-state", "--log", str(log)],
            capture_output=True, text=True, cwd=ROOT, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        logs.append(log.read_bytes())
    assert logs[0] == logs[1]
    events = [json.loads(line) for line in logs[0].decode().splitlines()]
    assert "two-state" in events[0]["variability"]
    started = [e for e in events if e["event"] == "task_started"]
    assert started and all(e["run_for"] != e["duration"] for e in started)
    report, _ = analyse("varied", [str(tmp_path / "a.log")])
    ratios = [e["run_for"] / e["duration"] for e in started]
    assert report["variability"]["count"] == len(started)
    assert report["variability"]["max"] == pytest.approx(max(ratios))
    plain = tmp_path / "plain.log"  # the same run's start lines without the speed model's
    plain.write_text("".join(json.dumps({k: v for k, v in e.items() if k != "run_for"}) + "\n"
                             for e in events if e["event"] in ("job_arrived", "task_started")))
    assert "variability" not in analyse("plain", [str(plain)])[0]
