"""Errors the core raises: bad input that names its field, and impossible transitions."""

from __future__ import annotations


class InvalidInput(ValueError):
    """Input the core refuses. `field` is a dotted path such as `tasks[3].cpu_m`."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class IllegalTransition(RuntimeError):
    """A lifecycle move the transition table forbids; carries the entity's story."""

    def __init__(self, entity: str, old: str, new: str, story: list[dict]) -> None:
        lines = "\n".join(f"  {entry}" for entry in story) or "  (no history recorded)"
        super().__init__(f"{entity}: illegal transition {old} -> {new}; story:\n{lines}")
        self.entity = entity
        self.old = old
        self.new = new
        self.story = story


class InvariantViolated(AssertionError):
    """Raised by `validate()` when a state object breaks an invariant (docs/architecture.md,
    Invariants)."""
