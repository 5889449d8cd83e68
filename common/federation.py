"""The federation configuration: one TOML file that every service, the simulator and the tests read.

A GM, an LM or a worker agent reads the same file and finds its own part by the id it gets
from its environment; the simulator reads it to build the whole federation in one process.
This module parses the text (the caller opens the file: the core does no I/O), checks it and
answers the questions the drivers ask: the topology of each LM, a GM's `GMConfig`, the nodes
a worker agent hosts, which GM serves a user's queue.

Shape of the file (every key is optional unless marked required)::

    seed = 0                       # nodes' constraints are drawn from (seed, LM id)
    num_constraints = 21
    gms = ["gm-1", "gm-2"]         # required, at least one

    [timing]                       # seconds, all positive
    heartbeat_interval = 1.0       # LM -> GMs partition state, while it changes
    heartbeat_keepalive = 2.0      # ... and while it does not, at least this often
    worker_heartbeat_interval = 1.0
    worker_timeout = 3.0           # a worker silent this long has its nodes marked down
    lm_timeout = 5.0               # an LM silent this long is left out of a GM's searches
    attempt_grace = 3.0
    tick_interval = 0.25
    worker_launch_pace = 0.02      # busy senders' requests at least this far apart: LM -> worker,
    report_pace = 0.1              # ... worker -> LM,
    task_event_pace = 0.05         # ... and LM -> GMs (task events through RabbitMQ)
    report_ends = false            # an LM publishes its state after each step ending a task

    [limits]                       # the bounds of the queues between components
    gm_backlog_tasks = 5000        # a GM answers 429 to new jobs while this many tasks wait
    lm_requests_in_flight = 1      # per GM and LM; placements meanwhile join the next batch
    lm_task_event_outbox = 20000   # an LM refuses new work while this many events wait
    max_tasks_per_job = 10000      # a wider job is refused at submission (422)
    submit_rate_per_token = 200.0  # jobs/s one token may submit to a GM (0: no bound); past
    submit_burst = 400             # ... this burst, 429 with Retry-After

    [policies]
    job = "fifo"                   # or slearn, las, 3sigma, 3sigma-tl, point-est, oracle
    fairness = "fair_share"        # or "fair_share_paper" (Algorithm 2 as written), "none"
    placement = "first_fit"        # or "best_fit"
    local_queue = "srpt"           # or "fifo"
    work_conserving = true
    [policies.fairness_options]    # how Algorithm 2 is carried out; a key left out takes the
    queue_order = "job_policy"     # fairness policy's default (docs/fairness.md): or
    own_usage = "heartbeats"       # "round_robin", "launches", "tail", false, "cpu" as the
    refused = "front"              # paper (fair_share_paper's defaults)
    anti_oscillation = true
    usage = "dominant"
    [policies.queues]              # the priority queues of every job policy but fifo
    levels = 10
    first_limit = 1000.0
    growth = 10.0
    weight_decay = 10.0
    [policies.slearn]
    sampling_ratio = "adaptive"    # or a fraction, e.g. 0.03
    thin_threshold = 3
    score_window = 100
    [policies.history]             # 3sigma, 3sigma-tl, point-est
    history_window = 20
    min_history = 2
    [policies.local_queues]        # worker local queues; depth 0 keeps them empty
    depth = 0                      # attempts that may wait on one busy node
    aging = 0.0                    # srpt: priority credit (work-s) per second waited
    preemptive = false             # a far shorter arrival suspends a running task
    preempt_factor = 10.0
    [policies.redundancy]          # redundant copies of running tasks on an LM's idle nodes
    policy = "none"                # or "srpt+r", "fair+r", "laps+r"
    beta = 0.5                     # laps+r: the share of the latest tasks that get copies
    max_copies = 4                 # copies of one task, the original included (0: no bound)

    [[queues]]                     # required, at least one per GM
    name = "q1"
    share = 0.5
    gm = "gm-1"

    [[lms]]                        # required, at least one; nodes generated ...
    id = "lm-1"
    nodes = { count = 40, cpu_m = 2000, mem_mib = 4096, workers = 2, profile = "A" }

    [[lms]]                        # ... or listed
    id = "lm-2"
    [[lms.nodes]]
    id = "lm-2/n0"
    worker = "lm-2/w0"
    cpu_m = 2000
    mem_mib = 4096
    constraints = [0, 4, 20]

Generated nodes are `{lm}/n0 .. {lm}/n{count-1}` on workers `{lm}/w0 .. {lm}/w{workers-1}`,
spread round-robin (node i on worker i mod workers). Round-robin rather than blocks because
an LM's GM partitions are contiguous blocks of nodes (`initial_partition`): round-robin puts
part of every GM's partition on every worker, so losing one worker container costs every
GM alike instead of wiping out one GM's whole internal partition.

The file is checked in two steps. Its tables are pydantic models (`_FederationFile` and the
models it nests): types are strict (TOML has them: `"100"` is not a cpu, `5.0` not a count),
ranges and each table's own rules are checked there, and the choices of a policy key are the
names its family's registry knows (`common/policies/`). `Federation` then checks what spans
tables (ids unique across LMs, a queue's GM exists, shares add up), for a federation built in
code as well. Every error is an `InvalidInput` naming a dotted path into the file
(`lms[1].nodes.count`, `queues[2].gm`, `timing.heartbeat_intervall`) and the first one, in the
order of the shape above, is the one reported; an unknown key is an error, so a misspelling
cannot silently leave a default in force.

A table of a policy family's options `resolve()`s into the family's own options type
(`JobOptions`, `FairnessOptions`, `LocalQueueOptions`, `CopyOptions`: frozen dataclasses in
`common/policies/`), which is what the cores get and pass to the policy: the one way options
reach a policy, and common/policies never sees the file's models.
"""

from __future__ import annotations

import difflib
import hashlib
import math
import random
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    model_validator,
)
from pydantic_core import PydanticCustomError

from common.cluster import ClusterTopology
from common.constraint_model import MACHINE_CONSTRAINT_PERCENT, machine_constraints
from common.errors import InvalidInput
from common.gm_config import GMConfig
from common.models import DEFAULT_NUM_CONSTRAINTS, NodeSpec
from common.policies.copies import COPY_POLICIES, CopyOptions, reprioritizes
from common.policies.fairness import (
    FAIRNESS_POLICIES,
    OPTION_CHOICES,
    FairnessOptions,
    UserQueue,
    unknown_choice,
    validate_queues,
)
from common.policies.job import (
    JOB_POLICIES,
    JobOptions,
    LadderOptions,
    LPOrderOptions,
    RuntimeHistoryOptions,
    SamplingOptions,
)
from common.policies.jobs.history import FinishedJob
from common.policies.local_queue import LOCAL_QUEUE_POLICIES, LocalQueueOptions
from common.policies.placement import PLACEMENT_POLICIES
from common.policies.registry import Registry
from common.resources import Resources
from common.speed import SpeedModel

# -- machine-constraint profiles -------------------------------------------------------------

# STAND-INS, not data. The Megha paper gives each LM the machine-constraint probabilities of
# one of Sharma et al.'s (SoCC 2011) Google clusters A, B or C, but Sharma's per-cluster
# tables are not in any public text we could reach. The one public vector is
# `MACHINE_CONSTRAINT_PERCENT` in `common/constraint_model.py`, taken from the Megha authors'
# constraint-aware simulator: profile A is exactly that vector. B and C vary how densely
# machines carry attributes, not which attributes are common, so the task model (tuned to
# the same 21 ids) still fits:
# B scales every percentage by 0.75 (a sparser cluster: a constrained task fits fewer
# machines, 7.2 constraints per machine on average), C by 1.25, capped at 100 (a richer one,
# 11.8 per machine; A has 9.65). Replace them here if the real tables turn up.
PROFILE_B_SCALE = 0.75
PROFILE_C_SCALE = 1.25


def _scaled(percent: Sequence[float], factor: float) -> tuple[float, ...]:
    return tuple(min(100.0, p * factor) for p in percent)


MACHINE_PROFILES: dict[str, tuple[float, ...]] = {
    "A": tuple(float(p) for p in MACHINE_CONSTRAINT_PERCENT),
    "B": _scaled(MACHINE_CONSTRAINT_PERCENT, PROFILE_B_SCALE),
    "C": _scaled(MACHINE_CONSTRAINT_PERCENT, PROFILE_C_SCALE),
}
# The order `profile = "random"` draws from: a fixed tuple, so the draw never depends on
# how a dict happens to be ordered.
PROFILE_NAMES: tuple[str, ...] = ("A", "B", "C")
RANDOM_PROFILE = "random"


# -- the file's tables (pydantic) --------------------------------------------------------------

# A check in the file's own words. `key` names the field of the table a table-wide check is
# about (a timeout measured against an interval), which pydantic's location would not.
_REFUSED = "federation_file"


def _refused(message: str, key: str | None = None) -> PydanticCustomError:
    return PydanticCustomError(_REFUSED, "{message}", {"message": message, "key": key})


class _Table(BaseModel):
    """A table of the file: strict types, frozen, and unknown keys refused by name."""

    model_config = ConfigDict(strict=True, frozen=True, extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: Any) -> Any:
        if isinstance(data, dict):
            unknown = [key for key in data if key not in cls.model_fields]
            if unknown:
                raise _refused(_unknown_keys(unknown, list(cls.model_fields)), key=unknown[0])
        return data


def _unknown_keys(unknown: Sequence[str], known: Sequence[str]) -> str:
    hint = difflib.get_close_matches(unknown[0], known, n=1)
    did_you_mean = f"; did you mean {hint[0]!r}?" if hint else ""
    return (f"unknown key{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))} "
            f"(known: {', '.join(known)}){did_you_mean}")


def _identifier(value: str) -> str:
    """Ids end up in URLs, broker queue names and log lines: no empties, no whitespace."""
    if not value or any(ch.isspace() for ch in value):
        raise _refused(f"must be a non-empty id without whitespace, got {value!r}")
    return value


def _one_of(registry: Registry) -> Callable[[str], str]:
    """A policy key's check: the names its family's registry knows, and no others."""

    def known(name: str) -> str:
        if name not in registry.names():
            raise _refused(registry.unknown(name))
        return name

    return known


def _profile(name: str) -> str:
    if name != RANDOM_PROFILE and name not in MACHINE_PROFILES:
        known = ", ".join((*PROFILE_NAMES, RANDOM_PROFILE))
        raise _refused(f"unknown profile {name!r} (known: {known})")
    return name


def _no_repeats(constraints: list[int]) -> list[int]:
    if len(set(constraints)) != len(constraints):
        raise _refused(f"repeats an id: {constraints}")
    return constraints


def _sampling_ratio(value: object) -> float | str:
    if value == "adaptive":
        return value
    if (isinstance(value, bool) or not isinstance(value, int | float)
            or not (math.isfinite(value) and 0 < value <= 1)):
        raise _refused(f'must be a fraction in (0, 1] or "adaptive", got {value!r}')
    return float(value)


def _fairness_choice(option: str) -> Callable[[str], str]:
    """An option of [policies.fairness_options]: one of its choices (OPTION_CHOICES)."""

    def known(value: str) -> str:
        if value not in OPTION_CHOICES[option]:
            raise _refused(unknown_choice(option, value))
        return value

    return known


def _speed_model_name(value: str) -> str:
    if value not in ("none", "two-state", "gamma"):
        raise _refused(f'must be "none", "two-state" or "gamma", got {value!r}')
    return value


Identifier = Annotated[str, AfterValidator(_identifier)]
SamplingRatio = Annotated[Any, AfterValidator(_sampling_ratio)]
Seconds = Annotated[float, Field(gt=0, allow_inf_nan=False)]
AtLeastOne = Annotated[int, Field(ge=1)]
JobPolicyName = Annotated[str, AfterValidator(_one_of(JOB_POLICIES))]
FairnessPolicyName = Annotated[str, AfterValidator(_one_of(FAIRNESS_POLICIES))]
PlacementPolicyName = Annotated[str, AfterValidator(_one_of(PLACEMENT_POLICIES))]
LocalQueuePolicyName = Annotated[str, AfterValidator(_one_of(LOCAL_QUEUE_POLICIES))]
CopyPolicyName = Annotated[str, AfterValidator(_one_of(COPY_POLICIES))]


class Timing(_Table):
    heartbeat_interval: Seconds = 1.0  # LM -> GMs; the paper used 10 s, the testbed 1 s
    worker_heartbeat_interval: Seconds = 1.0  # worker agent -> its LM
    worker_timeout: Seconds = 3.0  # three missed worker heartbeats: its nodes are down
    lm_timeout: Seconds = 5.0  # a GM leaves an LM this silent out of its searches
    attempt_grace: Seconds = 3.0  # see GMConfig.attempt_grace
    # how often a service feeds its core a Tick: the resolution of its timeouts and of the
    # LM's heartbeat; every wake-up costs an idle service CPU, so not finer than needed
    tick_interval: Seconds = 0.25
    # An LM whose state has not changed repeats its heartbeat only this often (None: every
    # interval): GMs still hear it is alive, and an idle testbed does not pay for identical
    # snapshots. Between heartbeat_interval and lm_timeout.
    heartbeat_keepalive: Seconds | None = None
    # Pacing of the batched flows (services/batching.py): a busy sender's requests leave at
    # least this far apart, and what is offered meanwhile shares the next one. Each request
    # costs both ends a fixed price in CPU, so a longer pace buys capacity with latency.
    # Measured on the testbed at 300 tasks/s (benchmarks/bench_testbed.py): from 5, 20 and
    # 20 ms to these, the host's CPU fell from 197% to 188% and allocation p50 from 139 ms to
    # 92 ms, the wait for a paced request being far shorter than the wait for a busy core.
    worker_launch_pace: Seconds = 0.02  # LM -> a worker agent: adds up to this to allocation
    report_pace: Seconds = 0.1  # worker -> its LM: starts carry the worker's clock, not delayed
    task_event_pace: Seconds = 0.05  # LM -> each GM through RabbitMQ: GMs hear this much later
    # An LM publishes its state after every step that ended a task, as the published Megha
    # simulator's LM reports each end at once: GMs place on the room an end frees without
    # waiting for the next heartbeat, for one snapshot per step that ended something. The
    # paper's LM (and the default) tells GMs of freed room with its heartbeats.
    report_ends: bool = False

    @model_validator(mode="after")
    def _consistent(self) -> Timing:
        keepalive = self.heartbeat_keepalive
        if keepalive is not None and not (
                self.heartbeat_interval <= keepalive < self.lm_timeout):
            raise _refused(
                f"must be at least heartbeat_interval ({self.heartbeat_interval}) and less than "
                f"lm_timeout ({self.lm_timeout}), got {keepalive}", key="heartbeat_keepalive")
        # A timeout shorter than the interval it waits on would declare healthy peers dead
        # between two heartbeats.
        if self.worker_timeout <= self.worker_heartbeat_interval:
            raise _refused(
                f"must exceed worker_heartbeat_interval ({self.worker_heartbeat_interval}), "
                f"got {self.worker_timeout}", key="worker_timeout")
        if self.lm_timeout <= self.heartbeat_interval:
            raise _refused(
                f"must exceed heartbeat_interval ({self.heartbeat_interval}), "
                f"got {self.lm_timeout}", key="lm_timeout")
        return self


class QueueOptions(_Table):
    """The priority-queue ladder of every size-aware job policy (common/policies/jobs/)."""

    levels: Annotated[int, Field(ge=1, le=30)] = 10
    first_limit: Seconds = 1000.0  # task-seconds: the bound of the top queue (10^6 ms)
    growth: Annotated[float, Field(gt=1, allow_inf_nan=False)] = 10.0  # bound to next bound
    weight_decay: Annotated[float, Field(gt=1, allow_inf_nan=False)] = 10.0  # weight to next

    def resolve(self) -> LadderOptions:
        return LadderOptions(**self.model_dump())


class SLearnOptions(_Table):
    # the fraction of a wide job's tasks run first as pilots, or "adaptive" (learnt online)
    sampling_ratio: SamplingRatio = "adaptive"
    thin_threshold: AtLeastOne = 3  # jobs with fewer tasks skip sampling
    score_window: AtLeastOne = 100  # adaptive: jobs per ratio its score is the mean over

    def resolve(self) -> SamplingOptions:
        return SamplingOptions(**self.model_dump())


class TrainingJob(_Table):
    """[[policies.history.training]]: a job the history predictors know before the first
    arrival, as if they had seen it finish."""

    name: str | None = None  # a recurring job's template
    user: str
    width: AtLeastOne  # its tasks
    mean_task_runtime: Annotated[float, Field(ge=0, allow_inf_nan=False)]  # seconds


class HistoryOptions(_Table):
    # 3sigma, point-est: finished jobs kept per feature value, and needed before predicting
    history_window: AtLeastOne = 20
    min_history: AtLeastOne = 2
    training: tuple[TrainingJob, ...] = ()  # known before the first arrival, oldest first

    @model_validator(mode="after")
    def _fits(self) -> HistoryOptions:
        if self.min_history > self.history_window:
            raise _refused(f"must be at most history_window ({self.history_window}), got "
                           f"{self.min_history}", key="min_history")
        return self

    def resolve(self) -> RuntimeHistoryOptions:
        return RuntimeHistoryOptions(self.history_window, self.min_history, tuple(
            FinishedJob(job.name, job.user, job.width, job.mean_task_runtime)
            for job in self.training))


class LPOptions(_Table):
    """The `lp` job policy's re-solving (common/policies/jobs/lp_order.py)."""

    resolve_first: Seconds = 1.0  # the first interval, from the GM's first job
    resolve_growth: Annotated[float, Field(ge=1, allow_inf_nan=False)] = 1.5  # next / last
    resolve_max: Seconds = 10.0  # no interval longer: a GM runs for as long as it is up
    max_jobs: AtLeastOne = 200  # jobs in one LP (the highest weight per volume)
    time_limit: Seconds = 0.5  # a solve that runs out keeps the previous order
    epsilon: Seconds = 0.5  # the LP's time points grow by 1 + epsilon

    @model_validator(mode="after")
    def _ordered(self) -> LPOptions:
        if self.resolve_max < self.resolve_first:
            raise _refused(f"must be at least resolve_first ({self.resolve_first}), got "
                           f"{self.resolve_max}", key="resolve_max")
        return self

    def resolve(self) -> LPOrderOptions:
        return LPOrderOptions(**self.model_dump())


class FairnessOptionsTable(_Table):
    """How the GMs carry out Algorithm 2 (common/policies/fairness.py, docs/fairness.md).
    Each key left out (None) takes the chosen fairness policy's default: today's refinements
    for fair_share, the paper's for fair_share_paper."""

    queue_order: Annotated[str, AfterValidator(_fairness_choice("queue_order"))] | None = None
    own_usage: Annotated[str, AfterValidator(_fairness_choice("own_usage"))] | None = None
    refused: Annotated[str, AfterValidator(_fairness_choice("refused"))] | None = None
    anti_oscillation: bool | None = None
    usage: Annotated[str, AfterValidator(_fairness_choice("usage"))] | None = None

    def resolve(self, fairness: str) -> FairnessOptions:
        """The options in force under the fairness policy `fairness`."""
        given = {key: value for key, value in self.model_dump().items() if value is not None}
        return replace(FAIRNESS_POLICIES.get(fairness).defaults, **given)


class LocalQueuesTable(_Table):
    """Worker local queues (docs/local-queues.md). Depth 0 is Megha's: a GM places a task
    only where it fits now, so a worker's queue stays empty. (`LocalQueueOptions` is what the
    local queue policies get of it, `aging`: depth is the LM's, preemption the worker's.)"""

    # attempts that may wait in one busy node's queue at its worker; the LM enforces it
    depth: Annotated[int, Field(ge=0, le=1000)] = 0
    # srpt: work-seconds of priority a queued task gains per second it waits, so a task of
    # estimate e is overtaken by later arrivals for at most e / aging seconds (0: never ages)
    aging: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 0.0
    # an arrival whose estimate is preempt_factor times smaller suspends a running task,
    # which resumes later with the work it has done
    preemptive: bool = False
    preempt_factor: Annotated[float, Field(gt=1, allow_inf_nan=False)] = 10.0

    def resolve(self) -> LocalQueueOptions:
        return LocalQueueOptions(aging=self.aging)


class RedundancyOptions(_Table):
    """Redundant copies of running tasks on an LM's idle nodes, the first to finish winning
    (docs/redundancy.md). "none" is Megha's: one attempt per task."""

    policy: CopyPolicyName = "none"
    # laps+r: copies go to the ceil(beta n) latest of the n running tasks
    beta: Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)] = 0.5
    # copies of one task, its original included; what the bound leaves goes to the next
    # tasks (0: no bound, as the paper, which had 100 machines)
    max_copies: Annotated[int, Field(ge=0, le=1000)] = 4

    def resolve(self) -> CopyOptions:
        """The copy policies' options (`max_copies` is the LM's `CopyBook`'s, whatever the
        policy)."""
        return CopyOptions(beta=self.beta)


class Policies(_Table):
    """The policy of each family, by the name its registry knows it by (common/policies/)."""

    job: JobPolicyName = "fifo"
    fairness: FairnessPolicyName = "fair_share"
    fairness_options: FairnessOptionsTable = Field(default_factory=FairnessOptionsTable)
    placement: PlacementPolicyName = "first_fit"
    local_queue: LocalQueuePolicyName = "srpt"
    work_conserving: bool = True
    local_queues: LocalQueuesTable = Field(default_factory=LocalQueuesTable)
    redundancy: RedundancyOptions = Field(default_factory=RedundancyOptions)
    queues: QueueOptions = Field(default_factory=QueueOptions)
    slearn: SLearnOptions = Field(default_factory=SLearnOptions)
    history: HistoryOptions = Field(default_factory=HistoryOptions)
    lp: LPOptions = Field(default_factory=LPOptions)

    def job_options(self) -> JobOptions:
        """The job policies' options: every table of theirs, of which the chosen policy reads
        those it uses ([policies.queues] every size-aware policy, [policies.slearn] slearn,
        ...; fifo none)."""
        return JobOptions(queues=self.queues.resolve(), slearn=self.slearn.resolve(),
                          history=self.history.resolve(), lp=self.lp.resolve())


class Limits(_Table):
    """Bounds on the queues between components (docs/queues.md lists every queue)."""

    # Tasks waiting in a GM (pending, held, or accepted and not yet taken from its broker
    # queue), shared among its queues by share: a queue below its part is admitted whatever
    # the others hold, one at its part gets 429 with Retry-After (services/admission.py).
    gm_backlog_tasks: AtLeastOne = 5000
    # Requests one GM keeps in flight to one LM; placements made meanwhile join the next.
    lm_requests_in_flight: AtLeastOne = 1
    # Tasks one GM step may place before the pass goes on in a later step, so that what it
    # placed leaves at once and other events wait less; 0: no bound (a whole job per step).
    gm_pass_tasks: Annotated[int, Field(ge=0)] = 0
    # Task events an LM holds while RabbitMQ cannot take them; at this many it refuses new
    # work (`lm_backlogged`) until half have left.
    lm_task_event_outbox: Annotated[int, Field(ge=2)] = 20_000
    # Tasks one job may have; a wider one is refused at submission (422) with this cap named.
    # The widest job of the bundled traces has 3,035. It sets the GM's body cap for a
    # submission too: 1 KiB per task (services/job_body.py).
    max_tasks_per_job: AtLeastOne = 10_000
    # Jobs per second one token (a user queue's, or the cluster token) may submit to a GM, in
    # bursts of up to `submit_burst`; past it 429 with Retry-After. 0: no bound.
    submit_rate_per_token: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 200.0
    submit_burst: AtLeastOne = 400


class _QueueEntry(_Table):
    name: Identifier
    share: Annotated[float, Field(allow_inf_nan=False)]  # range and sum: Federation checks them
    gm: str  # one of gms: Federation checks it


class _NodeBlock(_Table):
    """`nodes = { count = ..., ... }`: an LM's nodes, generated (see `generate_nodes`)."""

    count: AtLeastOne
    cpu_m: AtLeastOne
    mem_mib: AtLeastOne
    workers: AtLeastOne = 1
    # Default A: the one profile backed by public numbers.
    profile: Annotated[str, AfterValidator(_profile)] = "A"

    @model_validator(mode="after")
    def _every_worker_has_a_node(self) -> _NodeBlock:
        if self.workers > self.count:
            raise _refused(f"{self.workers} workers for {self.count} nodes would leave a "
                           "worker idle", key="workers")
        return self


class _NodeEntry(_Table):
    """One `[[lms.nodes]]` entry: a node as written."""

    id: Identifier
    worker: Identifier
    cpu_m: AtLeastOne
    mem_mib: AtLeastOne
    # range: Federation checks it against num_constraints
    constraints: Annotated[list[int], AfterValidator(_no_repeats)] = Field(default_factory=list)


# An LM's nodes are a table (generated) or an array of tables (listed). The tags appear in
# pydantic's error locations, never in the file: `_path` leaves them out.
_GENERATED, _LISTED = "<generated nodes>", "<listed nodes>"


def _nodes_shape(value: Any) -> str | None:
    if isinstance(value, dict):
        return _GENERATED
    if isinstance(value, list):
        return _LISTED
    return None


Nodes = Annotated[
    Annotated[_NodeBlock, Tag(_GENERATED)] | Annotated[list[_NodeEntry], Tag(_LISTED)],
    Discriminator(
        _nodes_shape, custom_error_type=_REFUSED, custom_error_message="{message}",
        custom_error_context={"message": "must be a table { count = ..., cpu_m = ..., "
                                         "mem_mib = ... } or [[lms.nodes]] entries"}),
]


class _LMEntry(_Table):
    id: Identifier
    nodes: Nodes


class Variability(_Table):
    """Machine service variability: each node's speed over time (common/speed.py). With a
    model, a task's wall runtime is the time its node takes to do its duration of work."""

    model: Annotated[str, AfterValidator(_speed_model_name)] = "none"
    shape: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 2.0  # gamma: rate's shape
    interval: Seconds = 10.0  # gamma: how long a rate lasts
    ap_length: list[float] = Field(default_factory=lambda: [2.0, 20.0])  # Gamma shape, scale
    up_length: list[float] = Field(default_factory=lambda: [2.0, 5.0])
    ap_rate: list[float] = Field(default_factory=lambda: [0.5, 1.5])  # uniform low, high
    up_rate: list[float] = Field(default_factory=lambda: [0.0, 0.2])

    @model_validator(mode="after")
    def _valid(self) -> Variability:
        for key in ("ap_length", "up_length", "ap_rate", "up_rate"):
            if len(getattr(self, key)) != 2:
                raise _refused(f"needs two numbers, got {getattr(self, key)}", key=key)
        try:
            self.speed_model()
        except InvalidInput as error:
            raise _refused(error.message, key=error.field.rsplit(".", 1)[-1]) from None
        return self

    def speed_model(self) -> SpeedModel | None:
        if self.model == "none":
            return None
        return SpeedModel(kind=self.model, shape=self.shape, interval=self.interval,
                          ap_length=tuple(self.ap_length), up_length=tuple(self.up_length),
                          ap_rate=tuple(self.ap_rate), up_rate=tuple(self.up_rate))


class _FederationFile(_Table):
    """The whole file; keys in the order of the shape in this module's docstring."""

    seed: int = 0
    num_constraints: AtLeastOne = DEFAULT_NUM_CONSTRAINTS
    gms: list[Identifier]
    timing: Timing = Field(default_factory=Timing)
    limits: Limits = Field(default_factory=Limits)
    policies: Policies = Field(default_factory=Policies)
    variability: Variability = Field(default_factory=Variability)
    queues: list[_QueueEntry]
    lms: list[_LMEntry]


# -- the parsed configuration ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LMConfig:
    id: str
    nodes: tuple[NodeSpec, ...]
    # The machine profile generated nodes were drawn from ("random" already resolved), so
    # logs can say which cluster an LM stands for; None for an explicit node list.
    profile: str | None = None

    @property
    def workers(self) -> tuple[str, ...]:
        """The worker agents of this LM, in the order their first node appears."""
        return tuple(dict.fromkeys(node.worker for node in self.nodes))


@dataclass(frozen=True, slots=True)
class Federation:
    """The whole federation as configured; checks its cross-references when built."""

    gms: tuple[str, ...]
    lms: tuple[LMConfig, ...]
    queues: tuple[UserQueue, ...]
    timing: Timing = field(default_factory=Timing)
    policies: Policies = field(default_factory=Policies)
    limits: Limits = field(default_factory=Limits)
    variability: Variability = field(default_factory=Variability)
    num_constraints: int = DEFAULT_NUM_CONSTRAINTS
    seed: int = 0
    # Lookups built once; the topologies (bit-vectors) are built on first use, because an LM
    # service needs only its own and a GM needs them all.
    _lm_by_id: dict[str, LMConfig] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    _worker_lm: dict[str, str] = field(default_factory=dict, init=False, repr=False, compare=False)
    _worker_nodes: dict[str, list[NodeSpec]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    _queue_gm: dict[str, str] = field(default_factory=dict, init=False, repr=False, compare=False)
    _topologies: dict[str, ClusterTopology] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        self._check_gms()
        self._check_lms()
        self._check_queues()

    # -- checks (each fills the lookups it vouches for) ------------------------------------

    def _check_gms(self) -> None:
        if not self.gms:
            raise InvalidInput("gms", "the federation needs at least one GM")
        seen: set[str] = set()
        for j, gm in enumerate(self.gms):
            if gm in seen:
                raise InvalidInput(f"gms[{j}]", f"duplicate id {gm!r}")
            seen.add(gm)

    def _check_lms(self) -> None:
        if not self.lms:
            raise InvalidInput("lms", "the federation needs at least one LM")
        node_owner: dict[str, str] = {}
        for i, lm in enumerate(self.lms):
            where = f"lms[{i}]"
            if lm.id in self._lm_by_id:
                raise InvalidInput(f"{where}.id", f"duplicate LM id {lm.id!r}")
            self._lm_by_id[lm.id] = lm
            if not lm.nodes:
                raise InvalidInput(f"{where}.nodes", "an LM needs at least one node")
            for k, node in enumerate(lm.nodes):
                self._check_node(node, lm.id, f"{where}.nodes[{k}]", node_owner)

    def _check_node(
        self, node: NodeSpec, lm: str, where: str, node_owner: dict[str, str]
    ) -> None:
        if node.node_id in node_owner:
            raise InvalidInput(
                f"{where}.id",
                f"duplicate node id {node.node_id!r} (already in LM {node_owner[node.node_id]!r})",
            )
        node_owner[node.node_id] = lm
        if node.lm != lm:
            raise InvalidInput(f"{where}.lm", f"{node.lm!r} is not its LM {lm!r}")
        owner = self._worker_lm.setdefault(node.worker, lm)
        if owner != lm:
            raise InvalidInput(
                f"{where}.worker",
                f"worker {node.worker!r} already belongs to LM {owner!r}: a worker agent "
                "reports to exactly one LM",
            )
        self._worker_nodes.setdefault(node.worker, []).append(node)
        for constraint in sorted(node.constraints):
            if not 0 <= constraint < self.num_constraints:
                raise InvalidInput(
                    f"{where}.constraints",
                    f"unknown constraint id {constraint!r} "
                    f"(ids are 0..{self.num_constraints - 1})",
                )

    def _check_queues(self) -> None:
        if not self.queues:
            raise InvalidInput("queues", "the federation needs at least one user queue")
        known = set(self.gms)
        names: set[str] = set()
        for i, queue in enumerate(self.queues):
            where = f"queues[{i}]"
            if queue.name in names:  # the second use is the mistake: name it, not the first
                raise InvalidInput(f"{where}.name", f"duplicate queue {queue.name!r}")
            names.add(queue.name)
            if queue.gm not in known:
                raise InvalidInput(
                    f"{where}.gm", f"unknown GM {queue.gm!r} (known: {', '.join(self.gms)})"
                )
        validate_queues(self.queues)  # shares in (0, 1], summing to at most 1
        self._queue_gm.update((queue.name, queue.gm) for queue in self.queues)
        served = set(self._queue_gm.values())
        for j, gm in enumerate(self.gms):
            # Jobs reach a GM only through the queues it serves: a GM without one would
            # hold a partition of every LM and never accept a job to place in it.
            if gm not in served:
                raise InvalidInput(
                    f"gms[{j}]", f"GM {gm!r} serves no queue and could accept no job; "
                    "give it a [[queues]] entry or remove it"
                )

    # -- what the drivers ask ------------------------------------------------------------------

    def lm(self, lm_id: str) -> LMConfig:
        try:
            return self._lm_by_id[lm_id]
        except KeyError:
            raise InvalidInput("lm_id", _unknown("LM", lm_id, self._lm_by_id)) from None

    def topology(self, lm_id: str) -> ClusterTopology:
        """One LM's topology (cached): what its LM service and a GM's view are built on."""
        topology = self._topologies.get(lm_id)
        if topology is None:
            lm = self.lm(lm_id)
            topology = ClusterTopology(lm.id, lm.nodes, self.gms, self.num_constraints)
            self._topologies[lm_id] = topology
        return topology

    def topologies(self) -> list[ClusterTopology]:
        """Every LM's topology, in file order (cached; the list itself is a fresh copy)."""
        return [self.topology(lm.id) for lm in self.lms]

    def gm_config(self, gm_id: str, epoch: int = 0) -> GMConfig:
        if gm_id not in self.gms:
            raise InvalidInput("gm_id", _unknown("GM", gm_id, self.gms))
        policies = self.policies
        return GMConfig(
            gm_id=gm_id,
            queues=self.queues,
            job_policy=policies.job,
            job_policy_options=policies.job_options(),
            fairness=policies.fairness,
            fairness_options=policies.fairness_options.resolve(policies.fairness),
            placement=policies.placement,
            work_conserving=policies.work_conserving,
            lm_timeout=self.timing.lm_timeout,
            attempt_grace=self.timing.attempt_grace,
            num_constraints=self.num_constraints,
            epoch=epoch,
            lm_window=self.limits.lm_requests_in_flight,
            pass_tasks=self.limits.gm_pass_tasks or None,
            reprioritize=reprioritizes(policies.local_queues.depth, policies.redundancy.policy),
            # Each GM its own stream (pilot choices), still fixed by the file's seed.
            seed=derived_seed(self.seed, "gm", gm_id),
        )

    def workers(self) -> dict[str, str]:
        """Worker id -> the LM it reports to."""
        return dict(self._worker_lm)

    def worker_nodes(self, worker_id: str) -> list[NodeSpec]:
        nodes = self._worker_nodes.get(worker_id)
        if nodes is None:
            raise InvalidInput("worker_id", _unknown("worker", worker_id, self._worker_nodes))
        return list(nodes)

    def worker_options(self) -> dict[str, Any]:
        """How every worker agent is set up (`WorkerAgent`'s keywords): its local queue's
        policy and options, and its nodes' speed."""
        queues = self.policies.local_queues
        return {"queue_policy": self.policies.local_queue, "queue_options": queues.resolve(),
                "preemptive": queues.preemptive, "preempt_factor": queues.preempt_factor,
                "speed": self.variability.speed_model(), "speed_seed": self.seed}

    def lm_options(self) -> dict[str, Any]:
        """How every LM is set up (`LocalMaster`'s keywords): its nodes' queue depth, its
        redundant copies, and whether it reports each end at once."""
        copies = self.policies.redundancy
        return {"queue_depth": self.policies.local_queues.depth, "redundancy": copies.policy,
                "copy_options": copies.resolve(), "max_copies": copies.max_copies,
                "report_ends": self.timing.report_ends}

    def queue_gm(self, user: str) -> str:
        """The GM that serves `user`'s queue: where that user's jobs are submitted."""
        try:
            return self._queue_gm[user]
        except KeyError:
            raise InvalidInput("user", _unknown("user queue", user, self._queue_gm)) from None


# -- parsing -----------------------------------------------------------------------------------


def load_federation(text: str, source: str = "<text>") -> Federation:
    """Parse and check a federation file's text; `source` names it in syntax errors."""
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:  # its message carries the line and column
        raise InvalidInput(source, f"TOML syntax error: {exc}") from None
    try:
        parsed = _FederationFile.model_validate(document)
    except ValidationError as error:
        raise _invalid(error) from None
    return Federation(
        gms=tuple(parsed.gms),
        lms=tuple(_lm_config(lm, parsed.seed, parsed.num_constraints) for lm in parsed.lms),
        queues=tuple(UserQueue(queue.name, queue.share, queue.gm) for queue in parsed.queues),
        timing=parsed.timing,
        policies=parsed.policies,
        variability=parsed.variability,
        limits=parsed.limits,
        num_constraints=parsed.num_constraints,
        seed=parsed.seed,
    )


def _lm_config(lm: _LMEntry, seed: int, num_constraints: int) -> LMConfig:
    if isinstance(lm.nodes, _NodeBlock):
        block = lm.nodes
        nodes, profile = generate_nodes(lm.id, block.count, Resources(block.cpu_m, block.mem_mib),
                                        block.workers, block.profile, seed, num_constraints)
        return LMConfig(lm.id, nodes, profile)
    return LMConfig(lm.id, tuple(
        NodeSpec(node_id=node.id, lm=lm.id, worker=node.worker,
                 capacity=Resources(node.cpu_m, node.mem_mib),
                 constraints=frozenset(node.constraints))
        for node in lm.nodes
    ))


def generate_nodes(
    lm_id: str,
    count: int,
    capacity: Resources,
    workers: int,
    profile: str,
    seed: int,
    num_constraints: int = DEFAULT_NUM_CONSTRAINTS,
) -> tuple[tuple[NodeSpec, ...], str]:
    """An LM's generated nodes and the profile they were drawn from.

    The draws come from one `random.Random` per LM seeded from (seed, LM id): the same file
    gives the same nodes in every process, and adding an LM leaves the others' nodes alone.
    `random` first picks the profile from that stream, as the paper picks a cluster per LM.
    Constraint ids past the profile's 21 are on no generated node.
    """
    rng = random.Random(derived_seed(seed, "lm", lm_id))
    if profile == RANDOM_PROFILE:
        profile = rng.choice(PROFILE_NAMES)
    percent = MACHINE_PROFILES[profile][:num_constraints]
    nodes = tuple(
        NodeSpec(
            node_id=f"{lm_id}/n{i}",
            lm=lm_id,
            worker=f"{lm_id}/w{i % workers}",
            capacity=capacity,
            constraints=machine_constraints(rng, percent),
        )
        for i in range(count)
    )
    return nodes, profile


def derived_seed(seed: int, kind: str, name: str) -> int:
    """A 64-bit seed from the file's seed and a component's name, the same in every process.

    Hashing (not `hash()`, which varies per process) keeps streams of different components
    apart while one number in the file still fixes them all.
    """
    digest = hashlib.sha256(f"{seed}/{kind}/{name}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


# -- errors --------------------------------------------------------------------------------------

# pydantic's error types, in the file's words ("must be ..., got <value>")
_MUST_BE = {
    "int_type": "must be an integer",
    "float_type": "must be a number",
    "string_type": "must be a string",
    "bool_type": "must be true or false",
    "list_type": "must be an array",
    "model_type": "must be a table",
    "dict_type": "must be a table",
    "finite_number": "must be a finite number",
}
_BOUNDS = {
    "greater_than": ("gt", "greater than"),
    "greater_than_equal": ("ge", "at least"),
    "less_than": ("lt", "less than"),
    "less_than_equal": ("le", "at most"),
}


def _invalid(error: ValidationError) -> InvalidInput:
    """The file's first error as an `InvalidInput` naming its dotted path."""
    first = error.errors(include_url=False)[0]
    kind, context = first["type"], first.get("ctx") or {}
    where = _path(first["loc"], context.get("key"))
    got = first.get("input")
    if kind == _REFUSED:
        message = context["message"]
    elif kind == "missing":
        message = "is required"
    elif kind in _BOUNDS:
        bound, words = _BOUNDS[kind]
        message = f"must be {words} {context[bound]:g}, got {got!r}"
    elif kind in _MUST_BE:
        message = f"{_MUST_BE[kind]}, got {got!r}"
    else:
        message = f"{first['msg']}, got {got!r}"
    return InvalidInput(where, message)


def _path(location: Sequence[str | int], key: str | None) -> str:
    """`lms[1].nodes.count` from pydantic's ('lms', 1, 'nodes', <tag>, 'count')."""
    path = ""
    for part in (*location, *([key] if key else [])):
        if isinstance(part, int):
            path += f"[{part}]"
        elif part not in (_GENERATED, _LISTED):
            path = f"{path}.{part}" if path else part
    return path or "federation"


def _unknown(kind: str, value: str, known: Sequence[str] | Mapping) -> str:
    return f"unknown {kind} {value!r} (known: {', '.join(known)})"
