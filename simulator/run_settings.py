"""The options of one simulation, typed: what `megha simulate` and the experiments share.

`RunSettings` is how `simulator.command.simulate_once` runs a workload beside its cluster and
scheduler (the workload's options, the model of time, processing, slot mode, the checks);
`Overrides` is what a run changes in its federation's policies; `Timing` is which model of
time is in force. The `add_*_arguments` functions offer their command-line options, so that
every command that takes one says the same of it.
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass
from pathlib import Path

from common.errors import InvalidInput
from common.federation import Federation, Variability
from common.policies.copies import COPY_POLICIES
from common.policies.fairness import FAIRNESS_POLICIES, OPTION_CHOICES, unknown_choice
from common.policies.job import JOB_POLICIES
from common.policies.placement import PLACEMENT_POLICIES
from loadgen.sources import add_workload_arguments
from simulator.baselines import DEFAULT_PROBE_RATIO
from simulator.engine import DelayModel
from simulator.federated import DEFAULT_STORY_ENTRIES
from simulator.processing import parse_processing
from simulator.timemodel import TimeModel

POLICY_OPTIONS = ("job_policy", "placement", "fairness", "pass_tasks", "variability",
                  "queue_depth", "redundancy", "report_ends", "refused")  # `Overrides`' fields
# what the published Megha simulator runs, beside its slot model (`--slots`): its GMs' order,
# no preemption for fairness, and LMs that report each task's end at once
PUBLISHED_SIMULATOR = {"job_policy": "fewest-tasks", "fairness": "none", "report_ends": True}
PROCESSING_HELP = ("each service a single server taking time on every event: 'model', the "
                   "calibrated cost of what its core did (repeatable; docs/processing.md; "
                   "model:0.1, those costs times 0.1), or 'measured', its core's CPU time (not "
                   "repeatable); ")


def add_timing_arguments(group: argparse._ArgumentGroup, processing: str | None = None,
                         said: str | None = None) -> None:
    """--delay, --calibration and --processing (default `processing`; None: none, or model
    with --calibration; `said`: what the help says of it instead)."""
    group.add_argument("--delay", default=None, metavar="DIST",
                       help="one-way network delay, s (default 0.0005; any distribution)")
    group.add_argument("--calibration", type=Path, default=None, metavar="FILE",
                       help="megha and centralized: the model of time fitted from the services' "
                            "own logs by `megha twin calibrate` (each hop's delay, each role's "
                            "processing costs) instead of one --delay for every message"
                            + ("; processing defaults to 'model' with its costs"
                               if processing is None else ""))
    default = (f"default {said}" if said is not None else
               f"default {processing}" if processing is not None else
               "default none (cores take no time), and model for the experiments of the Megha "
               "paper's figures")
    group.add_argument("--processing", type=_processing, default=processing,
                       metavar="{none,measured,model,model:SCALE}",
                       help=PROCESSING_HELP + default)


def add_policy_arguments(group: argparse._ArgumentGroup,
                         names: tuple[str, ...] = POLICY_OPTIONS) -> None:
    """The options of `Overrides` named in `names` (all by default), in this order."""
    arguments = {
        "job_policy": ("--job-policy", {
            "choices": JOB_POLICIES.names(),
            "help": "megha and centralized: the GMs' job policy (default: the federation "
                    "file's; fifo for --nodes)"}),
        "placement": ("--placement", {
            "choices": PLACEMENT_POLICIES.names(),
            "help": "megha and centralized: which fitting node a task gets (default: the "
                    "federation file's; first_fit for --nodes)"}),
        "fairness": ("--fairness", {
            "choices": FAIRNESS_POLICIES.names(),
            "help": "megha and centralized: whether and how the GMs preempt for their user "
                    "queues' shares (none: never; default: the federation file's "
                    "[policies] fairness; fair_share for --nodes). The file's "
                    "[policies.fairness_options] still apply"}),
        "pass_tasks": ("--pass-tasks", {
            "type": int, "metavar": "N",
            "help": "megha and centralized: tasks one GM step places before its pass goes on "
                    "in a later step (the federation file's [limits] gm_pass_tasks; 0: no "
                    "bound, a whole job per step, the default)"}),
        "variability": ("--variability", {
            "choices": ("none", "two-state", "gamma"),
            "help": "megha and centralized: how nodes' speeds vary, with its defaults "
                    "(default: the federation file's [variability]; none for --nodes)"}),
        "queue_depth": ("--queue-depth", {
            "type": int, "metavar": "N",
            "help": "megha and centralized: tasks may wait in a busy node's local queue at its "
                    "worker, up to N per node, in SRPT order (default: the federation file's "
                    "[policies.local_queues] depth; 0 for --nodes)"}),
        "redundancy": ("--redundancy", {
            "choices": COPY_POLICIES.names(),
            "help": "megha and centralized: redundant copies of running tasks on each LM's "
                    "idle nodes, the first to finish winning (default: the federation file's "
                    "[policies.redundancy] policy; none for --nodes)"}),
        "report_ends": ("--report-ends", {
            "action": "store_true",
            "help": "megha and centralized: each LM publishes its state after every step that "
                    "ended a task, as the published Megha simulator's LM reports each end at "
                    "once (default: the federation file's [timing] report_ends; off for "
                    "--nodes: GMs learn of freed room from heartbeats, as the paper's)"}),
        "refused": ("--refused", {
            "choices": OPTION_CHOICES["refused"],
            "help": "megha and centralized: where a task an LM refused (the GM's view was "
                    "stale) goes back: the front of its job's waiting tasks, or the tail, as "
                    "the Megha paper puts it at the end of the task request queue (default: "
                    "the federation file's [policies.fairness_options] refused, else the "
                    "fairness policy's: front for fair_share and none, tail for "
                    "fair_share_paper)"}),
    }
    for name in POLICY_OPTIONS:
        if name in names:
            flag, spec = arguments[name]
            group.add_argument(flag, default=None, **spec)
    if set(PUBLISHED_SIMULATOR) <= set(names):
        group.add_argument(
            "--published-simulator", action="store_true",
            help="what the published Megha simulator runs: " + ", ".join(
                f"--{name.replace('_', '-')}" + ("" if value is True else f" {value}")
                for name, value in PUBLISHED_SIMULATOR.items())
            + " (an option given explicitly wins); add --slots for its slot model")


def add_probe_ratio_argument(group: argparse._ArgumentGroup) -> None:
    group.add_argument("--probe-ratio", type=float, default=DEFAULT_PROBE_RATIO,
                       help="sparrow: probes per task (default 2)")


def add_check_argument(group: argparse._ArgumentGroup) -> None:
    group.add_argument("--no-check", action="store_true",
                       help="skip the end-of-run invariant checks")


def workload_defaults() -> argparse.Namespace:
    """loadgen's workload options (`megha replay`'s), each at its default."""
    parser = argparse.ArgumentParser(add_help=False)
    add_workload_arguments(parser)
    return parser.parse_args([])


WORKLOAD_OPTIONS = tuple(vars(workload_defaults()))


def workload_options(args: argparse.Namespace) -> argparse.Namespace:
    """Only the workload options of `args`: what `build_workload` reads."""
    return argparse.Namespace(**{name: getattr(args, name) for name in WORKLOAD_OPTIONS})


@dataclass(frozen=True)
class Overrides:
    """What a run changes in its federation, where given (None: the file's): its GMs' job
    policy (`--job-policy`) and placement (`--placement`), the tasks a GM step places
    (`--pass-tasks`), its nodes' speed model (`--variability`, with that model's defaults),
    its local queues' depth (`--queue-depth`), its LMs' copies (`--redundancy`), its
    fairness policy (`--fairness`: preemption for the queues' shares, or none) and whether
    its LMs report each end at once (`--report-ends`)."""

    job_policy: str | None = None
    placement: str | None = None
    pass_tasks: int | None = None
    variability: str | None = None
    queue_depth: int | None = None
    redundancy: str | None = None
    fairness: str | None = None
    report_ends: bool | None = None
    refused: str | None = None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Overrides:
        """The fields `args` has options for (a command may offer only some), with the
        published simulator's where `--published-simulator` asks and no option was given."""
        given = vars(args)
        fields = {name: given[name] for name in POLICY_OPTIONS if name in given}
        if given.get("published_simulator"):
            fields = {name: PUBLISHED_SIMULATOR.get(name) if value is None else value
                      for name, value in fields.items()}
        return cls(**fields)

    def describe(self) -> str:
        """The changes, in words ("" for none)."""
        return ", ".join(f"{name.replace('_', ' ')} {value}"
                         for name, value in dataclasses.asdict(self).items()
                         if value is not None)

    def check(self) -> None:
        for option, value in (("--pass-tasks", self.pass_tasks),
                              ("--queue-depth", self.queue_depth)):
            if value is not None and value < 0:
                raise InvalidInput(option, f"must be >= 0, got {value}")
        # a name from code, not from argparse's choices: each registry says what it knows
        for option, name, registry in (("--job-policy", self.job_policy, JOB_POLICIES),
                                       ("--placement", self.placement, PLACEMENT_POLICIES),
                                       ("--fairness", self.fairness, FAIRNESS_POLICIES),
                                       ("--redundancy", self.redundancy, COPY_POLICIES)):
            if name is not None and name not in registry.names():
                raise InvalidInput(option, registry.unknown(name))
        if self.refused is not None and self.refused not in OPTION_CHOICES["refused"]:
            raise InvalidInput("--refused", unknown_choice("refused", self.refused))

    def apply(self, federation: Federation) -> Federation:
        """`federation` with these changes."""
        self.check()
        policies = federation.policies
        if self.job_policy is not None:
            policies = policies.model_copy(update={"job": self.job_policy})
        if self.placement is not None:
            policies = policies.model_copy(update={"placement": self.placement})
        if self.fairness is not None:  # its options table ([policies.fairness_options]) stays
            policies = policies.model_copy(update={"fairness": self.fairness})
        if self.refused is not None:
            policies = policies.model_copy(update={
                "fairness_options": policies.fairness_options.model_copy(
                    update={"refused": self.refused})})
        if self.pass_tasks is not None:
            federation = dataclasses.replace(federation, limits=federation.limits.model_copy(
                update={"gm_pass_tasks": self.pass_tasks}))
        if self.queue_depth is not None:
            policies = policies.model_copy(update={
                "local_queues": policies.local_queues.model_copy(
                    update={"depth": self.queue_depth})})
        if self.redundancy is not None:
            policies = policies.model_copy(update={
                "redundancy": policies.redundancy.model_copy(
                    update={"policy": self.redundancy})})
        if policies is not federation.policies:  # a new federation is checked again: only if so
            federation = dataclasses.replace(federation, policies=policies)
        if self.variability is not None:
            federation = dataclasses.replace(federation,
                                             variability=Variability(model=self.variability))
        if self.report_ends is not None:
            federation = dataclasses.replace(federation, timing=federation.timing.model_copy(
                update={"report_ends": self.report_ends}))
        return federation


@dataclass(frozen=True)
class Timing:
    """How long messages take: one network delay for every message (`--delay`, a
    distribution) or the model of time fitted on the services (`--calibration`)."""

    delay: str | None = None
    calibration: Path | None = None

    def check(self) -> DelayModel:
        """The delay; bad input refused (naming the option) without reading the model."""
        delay = DelayModel.parse(self.delay)
        if self.calibration is not None and self.delay is not None:
            raise InvalidInput("--delay", "--calibration gives each hop its own delay: give "
                                          "one or the other")
        return delay

    def describe(self) -> str:
        """Which is in force, without reading the model."""
        if self.calibration is not None:
            return f"time model {self.calibration}"
        return f"delay {DelayModel.parse(self.delay)}"

    def resolve(self, scheduler: str = "megha") -> tuple[DelayModel, TimeModel | None, str]:
        """The network delay, the time model of `--calibration` if given (megha and
        centralized only: the baselines are models of their own), and how to say which is in
        force."""
        delay = self.check()
        if self.calibration is None:
            return delay, None, f"delay {delay}"
        if scheduler not in ("megha", "centralized"):
            return delay, None, f"delay {delay} (--calibration applies to megha and centralized)"
        model = TimeModel.load(self.calibration)
        return delay, model, f"time model {self.calibration} ({model.describe()})"


@dataclass(frozen=True)
class RunSettings:
    """How `simulate_once` runs a workload, beside the cluster and the scheduler."""

    workload: argparse.Namespace  # loadgen's workload options: what `build_workload` reads
    timing: Timing = Timing()
    processing: str | None = None  # None: model with a time model, else none
    slots: bool = False  # every node one slot, every task one slot
    probe_ratio: float = DEFAULT_PROBE_RATIO  # sparrow's
    check: bool = True  # the end-of-run invariant checks
    # megha and centralized: the transitions each simulated core keeps for its story
    story_entries: int = DEFAULT_STORY_ENTRIES

    @property
    def seed(self) -> int:
        return self.workload.seed

    def with_workload(self, **changes: object) -> RunSettings:
        """These settings with `changes` to the workload's options."""
        return dataclasses.replace(
            self, workload=argparse.Namespace(**(vars(self.workload) | changes)))

    def check_slots(self) -> None:
        check_slot_options(self.slots, self.workload)

def _processing(text: str) -> str:
    """--processing's value, checked here so a typo fails before anything runs."""
    try:
        parse_processing(text)
    except InvalidInput as error:
        raise argparse.ArgumentTypeError(error.message) from None
    return text


def check_slot_options(slots: bool, workload: argparse.Namespace) -> None:
    if slots and (workload.cpu_m is not None or workload.mem_mib is not None):
        raise InvalidInput("--slots", "slot mode gives every task one slot: drop --cpu-m and "
                                      "--mem-mib")
