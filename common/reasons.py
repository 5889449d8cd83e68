"""Why things happen, as data: placement outcomes, LM verdicts and task-event kinds.

A pending task always has a reason a user can read (`GET /v1/jobs/{id}` shows it), and the
LM's answer to every launch item is one of these, never a bare boolean.
"""

from __future__ import annotations

from enum import StrEnum


class Reason(StrEnum):
    # outcomes of the GM's own search over its view
    NO_CAPACITY = "no_capacity"  # feasible nodes exist, none has room in the GM's view now
    # the same for a task with a placement set (`TaskSpec.nodes`): every node of its set that
    # could take it is busy (or down) in the GM's view; `explain` says how many of each
    PLACEMENT_SET_BUSY = "placement_set_busy"
    NO_VIEW = "no_view"  # the GM has no state of any LM yet (just started)
    HELD_FOR_PILOTS = "held_for_pilots"  # slearn: waits for its job's pilot tasks
    WAITING_FOR_LM = "waiting_for_lm"  # placed, launch request in flight
    # LM verdicts on launch, repartition and preemption items
    LAUNCHED = "launched"
    # accepted into the node's local queue at its worker (the node is busy, its queue has
    # room: [policies.local_queues] depth); its resources are taken when it starts
    QUEUED = "queued"
    QUEUE_FULL = "queue_full"  # the node is busy and its local queue is at its depth
    ALREADY_RUNNING = "already_running"  # idempotent retry of a launch the LM already ran
    STALE_VIEW = "stale_view"  # the node lacks the resources the GM believed free
    NOT_OWNER = "not_owner"  # launch into a node outside the GM's partition
    OWNED_BY_REQUESTER = "owned_by_requester"  # repartition of a node already internal
    NODE_DOWN = "node_down"
    UNKNOWN_NODE = "unknown_node"
    CONSTRAINT_MISMATCH = "constraint_mismatch"
    DUPLICATE = "duplicate"  # the attempt id was used before: refused, never run twice
    VICTIM_GONE = "victim_gone"  # a preemption victim is no longer running there
    VICTIMS_INSUFFICIENT = "victims_insufficient"  # freeing the victims would not make room
    LM_RECOVERING = "lm_recovering"  # restarted LM still learning what its workers run
    # planned against an earlier incarnation of the LM, which may have run it already (a
    # retried or redelivered request): the new one cannot know, so it refuses; the GM places
    # the task again under a new attempt id
    LM_RESTARTED = "lm_restarted"
    # the LM's task events cannot reach the GMs (RabbitMQ away) and its outbox is full: it
    # takes nothing new until they drain, and meanwhile shows its nodes unavailable
    LM_BACKLOGGED = "lm_backlogged"
    LM_UNREACHABLE = "lm_unreachable"
    # task-event kinds reported by LMs to the owning GM
    STARTED = "started"
    FINISHED = "finished"
    PREEMPTED = "preempted"
    LOST = "lost"  # its node went down
    FAILED = "failed"
    CANCELLED = "cancelled"
    # a worker's report: a preemptive local queue paused the attempt for a much shorter one;
    # it waits in the node's queue again, with the work it has done
    SUSPENDED = "suspended"
    # a worker's report: how much work an attempt has done, asked for by its LM when a copy
    # of its task is launched (docs/redundancy.md)
    CHECKPOINTED = "checkpointed"


LAUNCH_OK = frozenset({Reason.LAUNCHED, Reason.QUEUED, Reason.ALREADY_RUNNING})
