"""The federation file: shipped files, generated and listed nodes, profiles, every refusal."""

from __future__ import annotations

from pathlib import Path

import pytest

from common.errors import InvalidInput
from common.federation import (
    MACHINE_PROFILES,
    PROFILE_B_SCALE,
    PROFILE_C_SCALE,
    Federation,
    LMConfig,
    load_federation,
)
from common.gm import GlobalMaster
from common.lm import LocalMaster
from common.models import NodeSpec
from common.policies.copies import CopyOptions
from common.policies.fairness import UserQueue
from common.policies.job import JobOptions, SamplingOptions
from common.policies.local_queue import LocalQueueOptions
from common.resources import Resources
from common.worker import WorkerAgent

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"

BASE = """\
seed = 7
gms = ["g1", "g2"]

[timing]
heartbeat_interval = 1.0

[policies]
job = "fifo"

[policies.slearn]
sampling_ratio = 0.05

[[queues]]
name = "a"
share = 0.5
gm = "g1"

[[queues]]
name = "b"
share = 0.5
gm = "g2"

[[lms]]
id = "l1"
nodes = { count = 5, cpu_m = 2000, mem_mib = 4096, workers = 2 }

[[lms]]
id = "l2"

[[lms.nodes]]
id = "l2/n0"
worker = "l2/w0"
cpu_m = 1000
mem_mib = 2048
constraints = [1, 2]

[[lms.nodes]]
id = "l2/n1"
worker = "l2/w0"
cpu_m = 1000
mem_mib = 2048
"""


def edit(old: str, new: str, text: str = BASE) -> str:
    """BASE with one exact fragment replaced (first occurrence); the fragment must be there."""
    assert old in text, old
    return text.replace(old, new, 1)


def generated(count: int, profile: str, seed: int = 0, **extra: int) -> str:
    options = ", ".join(f"{key} = {value}" for key, value in extra.items())
    return edit(
        'nodes = { count = 5, cpu_m = 2000, mem_mib = 4096, workers = 2 }',
        f'nodes = {{ count = {count}, cpu_m = 2000, mem_mib = 4096, profile = "{profile}"'
        f'{", " + options if options else ""} }}',
        edit("seed = 7", f"seed = {seed}"),
    )


def constraints_of(federation: Federation) -> list[tuple[str, frozenset[int]]]:
    return [(node.node_id, node.constraints) for lm in federation.lms for node in lm.nodes]


# -- the shipped files ------------------------------------------------------------------------


def test_the_testbed_file_loads_with_the_documented_shape() -> None:
    path = DEPLOY / "federation.toml"
    federation = load_federation(path.read_text(), str(path))
    assert federation.gms == ("gm-1", "gm-2")
    assert [lm.id for lm in federation.lms] == ["lm-1", "lm-2", "lm-3"]
    nodes = [node for lm in federation.lms for node in lm.nodes]
    assert len(nodes) == 120
    assert {node.capacity for node in nodes} == {Resources(2000, 4096)}
    for lm in federation.lms:
        assert lm.workers == (f"{lm.id}/w0", f"{lm.id}/w1")
        assert [len(federation.worker_nodes(w)) for w in lm.workers] == [20, 20]
    # the comment in the file says which profiles seed 0 draws
    assert [lm.profile for lm in federation.lms] == ["B", "C", "B"]
    assert sorted((q.name, q.share, q.gm) for q in federation.queues) == [
        ("q1", 0.10, "gm-1"), ("q2", 0.25, "gm-2"), ("q3", 0.15, "gm-2"), ("q4", 0.50, "gm-1"),
    ]
    assert federation.timing.heartbeat_interval == 1.0
    assert (federation.policies.job, federation.policies.fairness) == ("fifo", "fair_share")
    assert [len(t) for t in federation.topologies()] == [40, 40, 40]


def test_the_small_file_loads_with_the_documented_shape() -> None:
    path = DEPLOY / "federation-small.toml"
    federation = load_federation(path.read_text(), str(path))
    assert federation.gms == ("gm-1", "gm-2")
    assert [(lm.id, len(lm.nodes), lm.workers) for lm in federation.lms] == [
        ("lm-1", 4, ("lm-1/w0",)), ("lm-2", 4, ("lm-2/w0",)),
    ]
    assert len(federation.queues) == 2
    full = federation.worker_nodes("lm-2/w0")[0]
    assert full.constraints == frozenset(range(21))  # the file promises one universal node


# -- generated nodes -------------------------------------------------------------------------


def test_generated_nodes_get_ids_and_workers_round_robin() -> None:
    federation = load_federation(BASE)
    lm = federation.lm("l1")
    assert [node.node_id for node in lm.nodes] == [f"l1/n{i}" for i in range(5)]
    assert [node.worker for node in lm.nodes] == ["l1/w0", "l1/w1", "l1/w0", "l1/w1", "l1/w0"]
    assert {node.lm for node in lm.nodes} == {"l1"}
    assert {node.capacity for node in lm.nodes} == {Resources(2000, 4096)}
    assert lm.profile == "A"  # the default: the one profile backed by public numbers
    assert [n.node_id for n in federation.worker_nodes("l1/w1")] == ["l1/n1", "l1/n3"]


def test_the_same_text_gives_the_same_nodes_and_another_seed_other_constraints() -> None:
    text = generated(200, "random")
    first, second = load_federation(text), load_federation(text)
    assert first == second
    assert constraints_of(first) == constraints_of(second)
    assert [t.constraint_vectors for t in first.topologies()] == [
        t.constraint_vectors for t in second.topologies()
    ]
    other = load_federation(generated(200, "random", seed=1))
    assert [n for n, _ in constraints_of(other)] == [n for n, _ in constraints_of(first)]
    assert constraints_of(other) != constraints_of(first)


def test_an_lm_s_nodes_do_not_depend_on_the_other_lms() -> None:
    alone = load_federation(BASE).lm("l1")
    text = edit('[[lms]]\nid = "l1"', '[[lms]]\nid = "l0"\nnodes = { count = 3, cpu_m = 1, '
                'mem_mib = 1 }\n\n[[lms]]\nid = "l1"')
    assert load_federation(text).lm("l1") == alone


# Absolute tolerance on each constraint's frequency, in percentage points. With 20,000 nodes
# the standard error of a frequency is at most 0.35 points, so 2 points is over 5 sigma.
FREQUENCY_TOLERANCE = 2.0
MANY_NODES = 20_000


@pytest.mark.parametrize("profile", ["A", "B", "C"])
def test_profile_frequencies_match_the_profile(profile: str) -> None:
    lm = load_federation(generated(MANY_NODES, profile)).lm("l1")
    assert lm.profile == profile
    for j, percent in enumerate(MACHINE_PROFILES[profile]):
        observed = 100 * sum(j in node.constraints for node in lm.nodes) / MANY_NODES
        assert abs(observed - percent) <= FREQUENCY_TOLERANCE, (profile, j, observed, percent)


def test_profiles_are_the_public_vector_and_its_stated_scalings() -> None:
    base = MACHINE_PROFILES["A"]
    assert len(base) == 21 and base[0] == 38 and base[20] == 100
    assert MACHINE_PROFILES["B"] == tuple(p * PROFILE_B_SCALE for p in base)
    assert MACHINE_PROFILES["C"] == tuple(min(100.0, p * PROFILE_C_SCALE) for p in base)


def test_random_profile_picks_among_a_b_c_per_lm() -> None:
    lms = "\n".join(
        f'[[lms]]\nid = "r{i}"\nnodes = {{ count = 1, cpu_m = 1, mem_mib = 1, profile = "random" }}'
        for i in range(30)
    )
    text = BASE.split("[[lms]]")[0] + lms
    picks = [lm.profile for lm in load_federation(text).lms]
    assert set(picks) == {"A", "B", "C"}
    assert picks == [lm.profile for lm in load_federation(text).lms]


def test_fewer_constraint_ids_truncate_the_profile() -> None:
    text = edit("seed = 0", "seed = 0\nnum_constraints = 5", generated(500, "C"))
    text = edit("constraints = [1, 2]", "constraints = [4]", text)
    federation = load_federation(text)
    assert all(c < 5 for node in federation.lm("l1").nodes for c in node.constraints)
    assert federation.topology("l1").num_constraints == 5


# -- listed nodes and the lookups -------------------------------------------------------------


def test_listed_nodes_are_taken_as_written() -> None:
    federation = load_federation(BASE)
    lm = federation.lm("l2")
    assert lm.profile is None
    assert lm.nodes == (
        NodeSpec("l2/n0", "l2", "l2/w0", Resources(1000, 2048), frozenset({1, 2})),
        NodeSpec("l2/n1", "l2", "l2/w0", Resources(1000, 2048), frozenset()),
    )
    assert federation.workers() == {"l1/w0": "l1", "l1/w1": "l1", "l2/w0": "l2"}
    assert federation.queue_gm("a") == "g1" and federation.queue_gm("b") == "g2"


def test_topologies_are_cached_and_know_every_gm() -> None:
    federation = load_federation(BASE)
    topologies = federation.topologies()
    assert [t.lm for t in topologies] == ["l1", "l2"]
    assert all(t.gms == ("g1", "g2") for t in topologies)
    assert all(a is b for a, b in zip(topologies, federation.topologies(), strict=True))
    assert federation.topology("l2") is topologies[1]


@pytest.mark.parametrize(
    ("call", "field", "known"),
    [
        (lambda f: f.lm("l9"), "lm_id", "l1, l2"),
        (lambda f: f.worker_nodes("l9/w0"), "worker_id", "l1/w0"),
        (lambda f: f.queue_gm("zed"), "user", "a, b"),
        (lambda f: f.gm_config("g9"), "gm_id", "g1, g2"),
        (lambda f: f.topology("l9"), "lm_id", "l1, l2"),
    ],
)
def test_unknown_ids_in_lookups_are_refused_with_the_known_ones(call, field, known) -> None:
    with pytest.raises(InvalidInput) as error:
        call(load_federation(BASE))
    assert error.value.field == field
    assert known in error.value.message


def test_defaults_fill_what_the_file_leaves_out() -> None:
    text = "\n".join(line for line in BASE.splitlines()
                     if not line.startswith(("seed", "heartbeat", "job", "sampling")))
    federation = load_federation(text)
    assert federation.seed == 0 and federation.num_constraints == 21
    timing = federation.timing
    assert (timing.heartbeat_interval, timing.worker_heartbeat_interval, timing.worker_timeout,
            timing.lm_timeout, timing.attempt_grace, timing.tick_interval,
            timing.heartbeat_keepalive) == (1.0, 1.0, 3.0, 5.0, 3.0, 0.25, None)
    policies = federation.policies
    assert (policies.job, policies.fairness, policies.placement, policies.local_queue,
            policies.work_conserving) == ("fifo", "fair_share", "first_fit", "srpt", True)
    assert (policies.slearn.sampling_ratio, policies.slearn.thin_threshold) == ("adaptive", 3)
    assert (policies.queues.levels, policies.queues.first_limit) == (10, 1000.0)


# -- mapping into the core's constructors -----------------------------------------------------


def test_gm_config_maps_policies_and_timing() -> None:
    text = edit('job = "fifo"', 'job = "slearn"\nfairness = "none"\nplacement = "best_fit"\n'
                'work_conserving = false')
    text = edit("sampling_ratio = 0.05", "sampling_ratio = 0.05\nthin_threshold = 4", text)
    text = edit("heartbeat_interval = 1.0", "heartbeat_interval = 1.0\nlm_timeout = 7.5\n"
                "attempt_grace = 2.5", text)
    federation = load_federation(text)
    config = federation.gm_config("g2", epoch=3)
    assert config.gm_id == "g2" and config.epoch == 3
    assert config.job_policy == "slearn"
    # every job policy table, resolved: the file's slearn, the others' defaults
    assert config.job_policy_options == JobOptions(
        slearn=SamplingOptions(sampling_ratio=0.05, thin_threshold=4))
    assert config.fairness == "none"
    assert config.placement == "best_fit" and config.work_conserving is False
    assert (config.lm_timeout, config.attempt_grace) == (7.5, 2.5)
    assert config.queues == federation.queues and config.num_constraints == 21
    # each GM its own seed, fixed by the file
    assert config.seed != federation.gm_config("g1").seed
    assert config.seed == load_federation(text).gm_config("g2").seed
    gm = GlobalMaster(config, topologies=federation.topologies())
    assert gm.policy.sampling_ratio == 0.05 and gm.policy.thin_threshold == 4


@pytest.mark.parametrize(("tables", "reprioritize"), [
    ("", False),
    ("[policies.local_queues]\ndepth = 0\n", False),
    ("[policies.local_queues]\ndepth = 2\n", True),
    ('[policies.redundancy]\npolicy = "srpt+r"\n', True),
])
def test_gms_reprioritize_only_where_workers_order_by_priority(tables: str,
                                                              reprioritize: bool) -> None:
    text = edit("[policies.slearn]", f"{tables}\n[policies.slearn]")
    assert load_federation(text).gm_config("g1").reprioritize is reprioritize


def test_fifo_is_given_the_options_it_does_not_read_and_first_fit_is_the_default() -> None:
    federation = load_federation(BASE)  # carries a [policies.slearn] table, unused by fifo
    config = federation.gm_config("g1")
    assert config.job_policy == "fifo"
    assert config.job_policy_options.slearn == SamplingOptions(sampling_ratio=0.05)
    assert config.placement == "first_fit"
    gm = GlobalMaster(config, topologies=federation.topologies())
    assert gm.policy.options is config.job_policy_options


def test_the_worker_and_lm_policies_get_their_options_resolved_from_the_file() -> None:
    text = edit("[policies.slearn]", '[policies.local_queues]\ndepth = 2\naging = 0.5\n\n'
                '[policies.redundancy]\npolicy = "laps+r"\nbeta = 0.25\n\n[policies.slearn]')
    federation = load_federation(text)
    options = federation.worker_options()
    assert options["queue_options"] == LocalQueueOptions(aging=0.5)
    assert federation.lm_options()["copy_options"] == CopyOptions(beta=0.25)
    worker = next(iter(federation.workers()))
    WorkerAgent(worker, federation.worker_nodes(worker), **options)
    lm = LocalMaster(federation.topology("l1"), **federation.lm_options())
    assert lm.copies is not None and lm.copies.policy.options == CopyOptions(beta=0.25)


def test_lm_and_worker_build_from_the_federation() -> None:
    federation = load_federation(BASE)
    timing = federation.timing
    lm = LocalMaster(federation.topology("l1"), heartbeat_interval=timing.heartbeat_interval,
                     worker_timeout=timing.worker_timeout)
    assert lm.lm == "l1"
    for worker, owner in federation.workers().items():
        agent = WorkerAgent(worker, federation.worker_nodes(worker),
                            queue_policy=federation.policies.local_queue)
        assert agent.worker_id == worker and owner in worker


# -- refusals ---------------------------------------------------------------------------------

WITHOUT_LMS = BASE.split("[[lms]]")[0]

REFUSALS = [
    # (old fragment, new fragment, the field the error must name)
    ('gms = ["g1", "g2"]', "gms = []", "gms"),
    ('gms = ["g1", "g2"]\n', "", "gms"),
    ('gms = ["g1", "g2"]', 'gms = ["g1", "g1"]', "gms[1]"),
    ('gms = ["g1", "g2"]', 'gms = ["g1", 2]', "gms[1]"),
    ('gms = ["g1", "g2"]', 'gms = "g1"', "gms"),
    ('id = "l2"', 'id = "l1"', "lms[1].id"),
    ('id = "l2"\n', "", "lms[1].id"),
    ('id = "l1"', 'id = "l 1"', "lms[0].id"),
    ('id = "l2/n1"', 'id = "l2/n0"', "lms[1].nodes[1].id"),
    ('id = "l2/n0"', 'id = "l1/n0"', "lms[1].nodes[0].id"),
    ('worker = "l2/w0"', 'worker = "l1/w0"', "lms[1].nodes[0].worker"),
    ('worker = "l2/w0"\n', "", "lms[1].nodes[0].worker"),
    ('gm = "g2"', 'gm = "g3"', "queues[1].gm"),
    ('gm = "g2"', 'gm = "g1"', "gms[1]"),
    ('name = "b"', 'name = "a"', "queues[1].name"),
    ('share = 0.5\ngm = "g2"', 'share = 0\ngm = "g2"', "queues[1].share"),
    ('share = 0.5\ngm = "g2"', 'share = -0.1\ngm = "g2"', "queues[1].share"),
    ('share = 0.5\ngm = "g2"', 'share = 1.5\ngm = "g2"', "queues[1].share"),
    ('share = 0.5\ngm = "g2"', 'share = "half"\ngm = "g2"', "queues[1].share"),
    ('share = 0.5\ngm = "g1"', 'share = 0.6\ngm = "g1"', "queues"),
    ('share = 0.5\ngm = "g1"', 'gm = "g1"', "queues[0].share"),
    ("count = 5", "count = 0", "lms[0].nodes.count"),
    ("count = 5, ", "", "lms[0].nodes.count"),
    ("count = 5", "count = 5.0", "lms[0].nodes.count"),
    ("cpu_m = 2000", "cpu_m = 0", "lms[0].nodes.cpu_m"),
    ("mem_mib = 4096", "mem_mib = -1", "lms[0].nodes.mem_mib"),
    ("workers = 2", "workers = 0", "lms[0].nodes.workers"),
    ("workers = 2", "workers = 6", "lms[0].nodes.workers"),
    ("workers = 2", 'workers = 2, profile = "D"', "lms[0].nodes.profile"),
    ("nodes = { count = 5, cpu_m = 2000, mem_mib = 4096, workers = 2 }", "nodes = 5",
     "lms[0].nodes"),
    ("nodes = { count = 5, cpu_m = 2000, mem_mib = 4096, workers = 2 }", "nodes = []",
     "lms[0].nodes"),
    ("cpu_m = 1000", "cpu_m = 0", "lms[1].nodes[0].cpu_m"),
    ("cpu_m = 1000", "cpu_m = 1.5", "lms[1].nodes[0].cpu_m"),
    ("mem_mib = 2048", "mem_mib = true", "lms[1].nodes[0].mem_mib"),
    ("constraints = [1, 2]", "constraints = [1, 21]", "lms[1].nodes[0].constraints"),
    ("constraints = [1, 2]", "constraints = [-1]", "lms[1].nodes[0].constraints"),
    ("constraints = [1, 2]", 'constraints = ["gpu"]', "lms[1].nodes[0].constraints[0]"),
    ("constraints = [1, 2]", "constraints = [1, 1]", "lms[1].nodes[0].constraints"),
    ("constraints = [1, 2]", "constraints = 1", "lms[1].nodes[0].constraints"),
    ("seed = 7", "seed = 7\nnum_constraints = 2", "lms[1].nodes[0].constraints"),
    ("seed = 7", "seed = 7\nnum_constraints = 0", "num_constraints"),
    ("seed = 7", 'seed = "x"', "seed"),
    ('job = "fifo"', 'job = "lifo"', "policies.job"),
    ('job = "fifo"', "job = 1", "policies.job"),
    ('job = "fifo"', 'fairness = "drf"', "policies.fairness"),
    ('job = "fifo"', 'placement = "worst_fit"', "policies.placement"),
    ('job = "fifo"', 'local_queue = "lifo"', "policies.local_queue"),
    ('job = "fifo"', 'work_conserving = "yes"', "policies.work_conserving"),
    ("sampling_ratio = 0.05", "sampling_ratio = 0", "policies.slearn.sampling_ratio"),
    ("sampling_ratio = 0.05", "sampling_ratio = 1.5", "policies.slearn.sampling_ratio"),
    ("sampling_ratio = 0.05", "thin_threshold = 0", "policies.slearn.thin_threshold"),
    ("heartbeat_interval = 1.0", "heartbeat_interval = 0", "timing.heartbeat_interval"),
    ("heartbeat_interval = 1.0", "heartbeat_interval = -1.0", "timing.heartbeat_interval"),
    ("heartbeat_interval = 1.0", "heartbeat_interval = nan", "timing.heartbeat_interval"),
    ("heartbeat_interval = 1.0", "heartbeat_interval = inf", "timing.heartbeat_interval"),
    ("heartbeat_interval = 1.0", 'heartbeat_interval = "1s"', "timing.heartbeat_interval"),
    ("heartbeat_interval = 1.0", "tick_interval = 0", "timing.tick_interval"),
    ("heartbeat_interval = 1.0", "attempt_grace = -3", "timing.attempt_grace"),
    ("heartbeat_interval = 1.0", "worker_heartbeat_interval = 0",
     "timing.worker_heartbeat_interval"),
    ("heartbeat_interval = 1.0", "worker_timeout = 1.0", "timing.worker_timeout"),
    ("heartbeat_interval = 1.0", "heartbeat_interval = 6.0", "timing.lm_timeout"),
    ("heartbeat_interval = 1.0", "heartbeat_keepalive = 0.5", "timing.heartbeat_keepalive"),
    ("heartbeat_interval = 1.0", "heartbeat_keepalive = 5.0", "timing.heartbeat_keepalive"),
    ("heartbeat_interval = 1.0", "heartbeat_keepalive = -1", "timing.heartbeat_keepalive"),
]


@pytest.mark.parametrize(("old", "new", "field"), REFUSALS)
def test_each_bad_value_is_refused_naming_its_field(old: str, new: str, field: str) -> None:
    with pytest.raises(InvalidInput) as error:
        load_federation(edit(old, new))
    assert error.value.field == field, error.value


def test_sections_must_be_tables() -> None:
    no_policies = edit('[policies]\njob = "fifo"\n\n[policies.slearn]\nsampling_ratio = 0.05\n', "")
    no_timing = edit("[timing]\nheartbeat_interval = 1.0\n", "")
    # top-level keys go before the first table, so they are prepended
    for key, text in (("policies", no_policies), ("timing", no_timing), ("lms", WITHOUT_LMS),
                      ("queues", WITHOUT_LMS.split("[[queues]]")[0])):
        with pytest.raises(InvalidInput) as error:
            load_federation(f"{key} = 3\n" + text)
        assert error.value.field == key
    with pytest.raises(InvalidInput) as error:
        load_federation(edit("[policies.slearn]\nsampling_ratio = 0.05", "slearn = 1"))
    assert error.value.field == "policies.slearn"


def test_a_federation_needs_an_lm() -> None:
    with pytest.raises(InvalidInput) as error:
        load_federation(WITHOUT_LMS)
    assert error.value.field == "lms"
    with pytest.raises(InvalidInput) as error:
        load_federation("lms = []\n" + WITHOUT_LMS)
    assert error.value.field == "lms"


def test_a_federation_needs_a_queue_for_each_gm() -> None:
    text = BASE.replace('[[queues]]\nname = "a"\nshare = 0.5\ngm = "g1"\n', "")
    with pytest.raises(InvalidInput, match="serves no queue") as error:
        load_federation(text)
    assert error.value.field == "gms[0]"


def test_policy_errors_list_the_known_names() -> None:
    cases = [('job = "lifo"',
              "3sigma, 3sigma-mean, 3sigma-tl, fewest-tasks, fifo, las, lp, oracle, point-est, "
              "psrs, slearn"),
             ('fairness = "drf"', "fair_share, fair_share_paper, none"),
             ('placement = "worst_fit"', "best_fit, first_fit, tetris"),
             ('local_queue = "lifo"', "fifo, srpt")]
    for line, known in cases:
        with pytest.raises(InvalidInput, match=known):
            load_federation(edit('job = "fifo"', line))


UNKNOWN_KEYS = [
    ("seed = 7", "seed = 7\nsede = 1", "sede"),
    ("heartbeat_interval = 1.0", "heartbeat_intervall = 1.0", "timing.heartbeat_intervall"),
    ('job = "fifo"', 'job = "fifo"\njbo = "slearn"', "policies.jbo"),
    ("sampling_ratio = 0.05", "ratio = 0.05", "policies.slearn.ratio"),
    ('name = "a"', 'name = "a"\nweight = 2', "queues[0].weight"),
    ('id = "l1"', 'id = "l1"\nprofile = "A"', "lms[0].profile"),
    ("workers = 2 }", "workers = 2, cpus = 4 }", "lms[0].nodes.cpus"),
    ('id = "l2/n1"', 'id = "l2/n1"\nmemory = 4', "lms[1].nodes[1].memory"),
]


@pytest.mark.parametrize(("old", "new", "field"), UNKNOWN_KEYS)
def test_unknown_keys_are_refused_at_every_level(old: str, new: str, field: str) -> None:
    with pytest.raises(InvalidInput, match="unknown key") as error:
        load_federation(edit(old, new))
    assert error.value.field == field


def test_a_misspelt_key_gets_a_suggestion() -> None:
    with pytest.raises(InvalidInput, match="did you mean 'heartbeat_interval'"):
        load_federation(edit("heartbeat_interval = 1.0", "heartbeat_intervall = 1.0"))


def test_a_toml_syntax_error_names_the_source_and_line() -> None:
    text = edit("[timing]\n", "[timing\n")  # line 4
    with pytest.raises(InvalidInput, match="line 4") as error:
        load_federation(text, "deploy/broken.toml")
    assert error.value.field == "deploy/broken.toml"
    assert "TOML syntax error" in error.value.message


def test_a_federation_built_in_code_is_checked_too() -> None:
    node = NodeSpec("x/n0", "x", "x/w0", Resources(1, 1))
    lm = LMConfig("x", (node,))
    with pytest.raises(InvalidInput) as error:
        Federation(("g1",), (lm,), (UserQueue("a", 1.0, "g2"),))
    assert error.value.field == "queues[0].gm"
    with pytest.raises(InvalidInput) as error:
        Federation(("g1",), (lm, lm), (UserQueue("a", 1.0, "g1"),))
    assert error.value.field == "lms[1].id"
    assert Federation(("g1",), (lm,), (UserQueue("a", 1.0, "g1"),)).queue_gm("a") == "g1"


def test_the_slearn_testbed_file_is_the_testbed_file_but_for_its_job_policy() -> None:
    root = Path(__file__).resolve().parents[2] / "deploy"
    plain = (root / "federation.toml").read_text().splitlines()
    header, *slearn = (root / "federation-slearn.toml").read_text().splitlines()
    assert header.startswith("# federation.toml with SLearn's job policy")
    differing = [(a.split("#")[0].strip(), b.split("#")[0].strip())
                 for a, b in zip(plain, slearn, strict=True) if a != b]
    assert differing == [('job = "fifo"', 'job = "slearn"')]


def test_the_redundancy_testbed_file_is_the_testbed_file_with_copies_and_variability() -> None:
    root = Path(__file__).resolve().parents[2] / "deploy"
    plain = (root / "federation.toml").read_text().splitlines()
    header, *redundancy = (root / "federation-redundancy.toml").read_text().splitlines()
    assert header.startswith("# federation.toml with machine variability and redundant")
    assert redundancy[:len(plain)] == plain
    federation = load_federation("\n".join(redundancy))
    assert federation.policies.redundancy.policy == "srpt+r"
    assert federation.variability.model == "two-state"
    assert federation.lm_options()["redundancy"] == "srpt+r"


def test_redundancy_options_are_checked_naming_the_key() -> None:
    root = Path(__file__).resolve().parents[2] / "deploy"
    text = (root / "federation-small.toml").read_text()
    for table, key in (('policy = "srpt"', "policies.redundancy.policy"),
                       ("beta = 0", "policies.redundancy.beta"),
                       ("max_copies = -1", "policies.redundancy.max_copies"),
                       ("copies = 2", "policies.redundancy.copies")):
        with pytest.raises(InvalidInput) as error:
            load_federation(text + f"\n[policies.redundancy]\n{table}\n")
        assert error.value.field == key, (table, error.value)
