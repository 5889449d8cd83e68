"""Same-instant entries of the engine's FIFO lane coalesce into one step (issue 38), and the
calls are made in exactly the order of one heap: a run is the same, step for step, with fewer
engine steps."""

from __future__ import annotations

import random

import pytest

from common.models import JobSpec, TaskSpec
from common.resources import Resources
from simulator.cluster import SLOT, shaped_federation
from simulator.engine import DelayModel, Engine
from tests.sim_runs import recorded_run


def test_same_instant_entries_step_as_one_in_their_order():
    engine, seen = Engine(), []
    first, second = seen.append, seen.append
    engine.at_fifo(1.0, first, "a")
    engine.at_fifo(1.0, second, "b")  # another action joins too
    engine.at_fifo(1.0, first, "c")
    engine.at_fifo(2.0, first, "d")
    assert engine.pending == 2
    engine.run()
    assert seen == ["a", "b", "c", "d"] and engine.steps == 2


def test_a_heap_entry_for_the_same_instant_keeps_its_place_between():
    engine, seen = Engine(), []
    engine.at_fifo(1.0, seen.append, "fifo first")
    engine.at(1.0, seen.append, "heap second")
    engine.at_fifo(1.0, seen.append, "fifo third: may not join the first")
    engine.at(0.5, seen.append, "heap earlier: no matter")
    engine.at_fifo(1.0, seen.append, "fifo fourth: joins the third")
    engine.run()
    assert seen == ["heap earlier: no matter", "fifo first", "heap second",
                    "fifo third: may not join the first", "fifo fourth: joins the third"]
    assert engine.steps == 4


def test_an_entry_scheduled_while_its_instant_steps_comes_after_the_batch():
    engine, seen = Engine(), []

    def send(name):
        seen.append(name)
        if name == "a":  # a message to self, at once: after what was already due now
            engine.at_fifo(engine.now, seen.append, "a's own")
            engine.at(engine.now, seen.append, "a's timer")

    engine.at_fifo(1.0, send, "a")
    engine.at_fifo(1.0, send, "b")
    engine.run()
    assert seen == ["a", "b", "a's own", "a's timer"]


def test_a_stop_inside_a_batch_leaves_the_rest_in_place():
    engine, seen = Engine(), []

    def stop(name):
        seen.append(name)
        engine.stopped = True

    engine.at_fifo(1.0, seen.append, "a")
    engine.at_fifo(1.0, stop, "b stops")
    engine.at_fifo(1.0, seen.append, "c")
    engine.at(1.0, seen.append, "heap after")
    engine.run()
    assert seen == ["a", "b stops"] and engine.pending == 2
    engine.stopped = False
    engine.at_fifo(1.0, seen.append, "d: may not jump the rest")
    engine.run()
    assert seen == ["a", "b stops", "c", "heap after", "d: may not jump the rest"]


@pytest.mark.parametrize("seed", range(5))
def test_coalescing_gives_the_order_of_one_heap(seed):
    orders, steps = [], []
    for coalesce in (False, True):
        engine, seen, rng = Engine(coalesce=coalesce), [], random.Random(seed)
        actions = {}

        def step(name, engine=engine, seen=seen, rng=rng, actions=actions):
            seen.append((engine.now, name))
            if len(seen) < 3000:
                # messages a constant or no delay away, to few receivers, and timers now and
                # then, some for the same instant
                for k in range(rng.choice((1, 1, 2, 3))):
                    to = actions[rng.randrange(3)]
                    engine.at_fifo(engine.now + rng.choice((0.5, 0.5, 0.0)), to, f"{name}{k}")
                if rng.random() < 0.3:
                    engine.at(engine.now + rng.choice((0.0, 0.5, 1.0)), step, f"{name}t")

        for receiver in range(3):
            actions[receiver] = lambda name, step=step: step(name)
        for k in range(5):
            engine.at(rng.choice((0.0, 0.5)), step, str(k))
        engine.run()
        orders.append(seen)
        steps.append(engine.steps)
    assert orders[0] == orders[1]
    assert steps[1] < steps[0]


def _jobs(seed: int, count: int) -> list[JobSpec]:
    rng = random.Random(seed)
    jobs = []
    for j in range(count):
        durations = [rng.choice((0.5, 1.0, 2.0, 7.0)) for _ in range(rng.randint(1, 12))]
        jobs.append(JobSpec(f"j{j}", f"q{1 + j % 2}", tuple(
            TaskSpec(f"j{j}/{i}", f"j{j}", Resources(*SLOT), duration=d)
            for i, d in enumerate(durations)), round(rng.uniform(0, 20), 1)))
    return jobs


@pytest.mark.parametrize("options", [
    {}, {"processing": "model"}, {"delay": DelayModel.parse("exp:0.0005")}],
    ids=["none", "model", "delay-exp"])
def test_a_simulation_is_the_same_with_fewer_steps(tmp_path, options):
    """Slot mode, saturated (tasks wait, queues preempt): the event log, byte for byte, and
    the outcome, with coalescing and without; with processing time and drawn delays too."""
    runs = []
    for coalesce in (False, True):
        federation = shaped_federation(24, 2, 3, slots=True, heartbeat_interval=1.0)

        def setup(sim, coalesce=coalesce):
            sim.engine.coalesce = coalesce

        runs.append(recorded_run(tmp_path / f"{coalesce}.log", federation, _jobs(3, 60), 5,
                                 setup, **options))
    (log_off, *rest_off, steps_off), (log_on, *rest_on, steps_on) = runs
    assert log_on == log_off and rest_on == rest_off
    if "delay" in options:  # drawn delays: no two messages arrive in one instant
        assert steps_on == steps_off
    else:
        assert steps_on < steps_off
