"""The bounded memory of ended attempts both attempt books keep (common/ended_memory.py)."""

import pytest

from common.ended_memory import EndedMemory
from common.errors import InvariantViolated


def test_the_oldest_end_is_forgotten_first_and_an_id_ended_again_keeps_its_place():
    memory: EndedMemory[str] = EndedMemory(2)
    memory.remember("a", "finished")
    memory.remember("b", "failed")
    memory.remember("a", "cancelled")  # updated, still the oldest
    assert memory.get("a") == "cancelled" and len(memory) == 2
    memory.remember("c", "finished")
    assert "a" not in memory and "b" in memory and "c" in memory
    assert memory.get("a") is None
    memory.validate("lm-1")


def test_validate_names_its_owner_when_the_order_and_the_states_differ():
    memory: EndedMemory[str] = EndedMemory(5)
    memory.remember("a", "finished")
    memory._order.append("ghost")
    with pytest.raises(InvariantViolated, match="lm-1: ended attempts"):
        memory.validate("lm-1")
