"""One step of a core: what handling one event carries from method to method.

Every core (GM, LM, worker) handles an event in one step. The step knows the stimulus that
caused it (its id goes into every transition the step logs, so a story can be followed from
cause to effect), the time of the step, and the commands the step has produced so far. Methods
take the step as their one context argument instead of `(stimulus_id, now, commands)` in
whatever order; what they return is their own result, never the commands.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from common.commands import Command


@dataclass(slots=True)
class Step:
    stimulus_id: str  # the event's id: what the transitions of this step were caused by
    now: float  # the core's clock for this step
    commands: list[Command] = field(default_factory=list)  # produced so far, in order

    def emit(self, command: Command) -> None:
        self.commands.append(command)
