"""The over-commit check the e2e tests apply to a testbed's event logs, on hand-made logs: a
check that a healthy testbed never trips must be seen tripping, or it proves nothing. No
containers here (no `e2e` mark): it runs with the unit tests' selections too."""

from __future__ import annotations

import pytest
from conftest import no_node_overcommitted

pytestmark = pytest.mark.timeout(30)

NODE = "lm-1/n0"  # deploy/federation.toml: 2000 m, 4096 MiB


def launched(attempt: str, cpu_m: int = 1000, mem_mib: int = 1024, svc: str = "lm-1") -> dict:
    return {"svc": svc, "event": "task_launched", "lm": svc, "node": NODE, "attempt": attempt,
            "cpu_m": cpu_m, "mem_mib": mem_mib}


def event(name: str, attempt: str | None = None, svc: str = "lm-1") -> dict:
    fields = {"svc": svc, "event": name, "lm": svc}
    if attempt is not None:
        fields |= {"attempt": attempt, "node": NODE}
    return fields


def test_a_node_filled_exactly_and_freed_again_passes() -> None:
    events = [launched("a#1"), launched("b#1"), event("task_finished", "a#1"),
              launched("c#1", mem_mib=3072), event("task_lost", "b#1"),
              event("task_preempted", "c#1")]
    assert no_node_overcommitted(events) == {"launched": 3, "adopted": 0, "ended": 3}


def test_more_cpu_than_the_node_has_fails() -> None:
    with pytest.raises(AssertionError, match="over-committed"):
        no_node_overcommitted([launched("a#1"), launched("b#1"), launched("c#1", 1, 1)])


def test_more_memory_than_the_node_has_fails() -> None:
    with pytest.raises(AssertionError, match="over-committed"):
        no_node_overcommitted([launched("a#1", 1, 4000), launched("b#1", 1, 97)])


def test_a_restarted_lm_holds_only_what_it_adopts() -> None:
    # the old process held 2000 m; the new one adopts one attempt (1000 m) and so has room
    # for exactly one more, with the demand of the adopted attempt's launch
    events = [launched("a#1"), launched("b#1"), event("lm_started"), event("attempt_adopted",
              "a#1"), launched("c#1"), event("task_finished", "a#1")]
    assert no_node_overcommitted(events)["adopted"] == 1
    with pytest.raises(AssertionError, match="over-committed"):
        no_node_overcommitted(events[:5] + [launched("d#1", 1, 1)])


def test_an_end_of_an_attempt_not_held_or_a_second_take_fails() -> None:
    with pytest.raises(AssertionError, match="did not hold"):
        no_node_overcommitted([launched("a#1"), event("lm_started"),
                               event("task_finished", "a#1")])
    with pytest.raises(AssertionError, match="took a#1 twice"):
        no_node_overcommitted([launched("a#1"), event("attempt_adopted", "a#1")])


def test_only_an_lms_own_events_count_for_its_nodes() -> None:
    # a GM's or worker's events about the node (other clocks, other processes) are not taken
    others = [launched("x#1", svc="gm-1"), launched("y#1", svc="lm-1/w0")]
    assert no_node_overcommitted([launched("a#1"), launched("b#1"), *others])["launched"] == 2
