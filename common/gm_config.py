"""How one GM is set up: its id, the federation's queues, its policies and its limits (built
from the federation file by `common/federation.py`)."""

from __future__ import annotations

from dataclasses import dataclass

from common.models import DEFAULT_NUM_CONSTRAINTS
from common.policies.fairness import FairnessOptions, UserQueue
from common.policies.job import JOB_DEFAULTS, JobOptions


@dataclass(frozen=True, slots=True)
class GMConfig:
    gm_id: str
    queues: tuple[UserQueue, ...]  # every queue of the federation; this GM serves its own
    job_policy: str = "fifo"
    # [policies.queues], [policies.slearn], [policies.history], [policies.lp]: the job policy
    # reads those it uses
    job_policy_options: JobOptions = JOB_DEFAULTS
    fairness: str = "fair_share"
    # how Algorithm 2 is carried out ([policies.fairness_options]); None: the fairness
    # policy's defaults (today's refinements for fair_share, the paper's for fair_share_paper)
    fairness_options: FairnessOptions | None = None
    placement: str = "first_fit"  # policies/placement.py: which fitting node a task gets
    work_conserving: bool = True  # slearn: idle capacity may run held tasks
    lm_timeout: float = 5.0  # an LM silent this long is left out of searches
    # A launched attempt that its LM's heartbeats stop listing for this long is taken as
    # lost (its end was never reported: the LM restarted, say) and its task is requeued.
    attempt_grace: float = 3.0
    max_failures: int = 3  # worker-reported failures of one task before its job fails
    max_losses: int = 20  # node losses and unanswered requests tolerated per task
    num_constraints: int = DEFAULT_NUM_CONSTRAINTS
    epoch: int = 0  # incarnation: attempt ids of a restarted GM never collide
    # Whether an earlier incarnation of this GM may have left attempts running: a GM looks
    # for them in every heartbeat (`AttemptBook.find_orphans`). A service always may (its
    # state may be gone while its attempts run on); a simulated GM never restarts.
    earlier_incarnations: bool = True
    seed: int = 0
    # requests in flight to one LM: placements made meanwhile join the next batch
    lm_window: int = 1
    # tasks one step's pass may place before it goes on in a later step (`ContinuePass`), so
    # that what it placed leaves at once; None: no bound, a whole job in one step
    pass_tasks: int | None = None
    # tell LMs when a job's priority changes (common/reprioritize.py): only where workers
    # order by it, a federation with local queues or redundant copies
    reprioritize: bool = False
