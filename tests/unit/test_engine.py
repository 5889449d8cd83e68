"""The engine steps in (time, seq) order whichever lane an entry went to."""

import random

import pytest

from common.errors import InvalidInput
from simulator.engine import Engine


def test_fifo_and_heap_entries_step_in_time_then_scheduling_order():
    engine = Engine()
    seen = []
    engine.at(1.0, seen.append, "heap 1.0 first")
    engine.at_fifo(1.0, seen.append, "fifo 1.0 second")
    engine.at_fifo(0.5, seen.append, "fifo 0.5")
    engine.at(1.0, seen.append, "heap 1.0 third")
    engine.at_fifo(0.7, seen.append, "fifo 0.7, earlier than the lane's last: heap")
    engine.at_fifo(2.0, seen.append, "fifo 2.0")
    assert engine.pending == 6
    engine.run()
    assert seen == ["fifo 0.5", "fifo 0.7, earlier than the lane's last: heap",
                    "heap 1.0 first", "fifo 1.0 second", "heap 1.0 third", "fifo 2.0"]
    assert engine.steps == 6 and engine.pending == 0


def test_an_entry_called_off_is_no_step_and_moves_no_clock():
    engine, seen = Engine(), []
    engine.at(1.0, seen.append, "kept")
    ended = engine.at(5.0, seen.append, "a killed task's end")
    engine.at(3.0, lambda _: seen.append(engine.now))
    engine.cancel(ended)
    assert engine.pending == 2
    engine.run()
    assert seen == ["kept", 3.0] and engine.steps == 2
    assert engine.now == 3.0 and engine.pending == 0


def test_two_lanes_give_the_order_of_one_heap():
    orders = []
    for use_fifo in (False, True):
        engine, seen, rng = Engine(), [], random.Random(7)

        def step(name, engine=engine, seen=seen, use_fifo=use_fifo, rng=rng):
            seen.append((engine.now, name))
            if len(seen) < 2000:
                # a message one constant delay away, and now and then a timer
                schedule = engine.at_fifo if use_fifo else engine.at
                schedule(engine.now + 0.5, step, f"{name}m")
                if rng.random() < 0.3:
                    engine.at(engine.now + rng.choice((0.0, 0.5, 1.0, 3.7)), step, f"{name}t")

        for k in range(5):
            engine.at(rng.random(), step, str(k))
        engine.run()
        orders.append(seen)
    assert orders[0] == orders[1]


def test_the_past_is_refused_in_either_lane():
    engine = Engine()
    engine.at(1.0, lambda _: (engine.at_fifo(0.5, print)))
    with pytest.raises(InvalidInput):
        engine.run()
