"""Algorithm 2 as the paper writes it (`fair_share_paper`) and today's refinements as options
(`[policies.fairness_options]`, common/policies/fairness.py): real GM, LM and worker cores in
the in-process harness (tests/harness.py), deliveries explicit where order matters."""

from __future__ import annotations

import dataclasses

import pytest
from harness import Federation, make_topologies
from one_gm_federation import one_gm_file

from common.errors import InvalidInput
from common.events import LaunchRequested
from common.federation import load_federation
from common.gm import GMConfig
from common.messages import RequestKind
from common.models import JobSpec, TaskSpec
from common.policies.fairness import PAPER, REFINED, FairnessOptions, FairShare, UserQueue
from common.resources import Resources

SLOT = Resources(1000, 1024)  # every node one slot, every task one slot


def job(job_id: str, user: str, width: int) -> JobSpec:
    tasks = tuple(TaskSpec(f"{job_id}/{i}", job_id, SLOT, frozenset(), 1.0)
                  for i in range(width))
    return JobSpec(job_id, user, tasks, 0.0)


def federation(queues: list[UserQueue], nodes: int, fairness: str = "fair_share_paper",
               options: FairnessOptions | None = None) -> Federation:
    gms = sorted({queue.gm for queue in queues})
    topologies = make_topologies(1, nodes, gms, capacity=SLOT, constraints=frozenset())
    configs = [GMConfig(gm, tuple(queues), fairness=fairness, fairness_options=options)
               for gm in gms]
    return Federation(topologies, configs)


def placed_users(fed: Federation) -> list[str]:
    return [log.fields["user"] for _, log in fed.logs if log.event == "task_placed"]


def heartbeat(fed: Federation) -> None:
    fed.tick(1.0)
    fed.run_until_quiet()


# -- (a) round-robin across a GM's own queues ------------------------------------------------


ONE_GM_TWO_QUEUES = [UserQueue("qa", 0.5, "gm-1"), UserQueue("qb", 0.5, "gm-1")]


def backlog_of_both_queues(options: FairnessOptions | None) -> Federation:
    """qa's long job arrives first, then qb's; both wait before the GM has seen any LM."""
    fed = federation(ONE_GM_TWO_QUEUES, nodes=4, options=options)
    fed.submit("gm-1", job("long", "qa", 12))
    fed.submit("gm-1", job("short", "qb", 8))
    assert not placed_users(fed)  # no LM known yet: nothing placed
    fed.drain()
    return fed


def test_round_robin_serves_a_gms_queues_in_turn_one_task_each() -> None:
    fed = backlog_of_both_queues(None)  # fair_share_paper: round_robin
    users = placed_users(fed)
    # while both queues wait, every other placement is qb's, though qa's job came first
    assert users[:16] == ["qa", "qb"] * 8
    assert users[16:] == ["qa"] * 4
    assert {e.job_id for e in fed.ended_jobs} == {"long", "short"}


def test_job_policy_order_serves_the_first_job_first_whatever_its_queue() -> None:
    fed = backlog_of_both_queues(FairnessOptions(queue_order="job_policy"))
    assert placed_users(fed) == ["qa"] * 12 + ["qb"] * 8


def test_round_robin_does_not_always_start_with_the_same_queue() -> None:
    """One slot: each pass places one task; the queue after the one served last goes next."""
    fed = federation(ONE_GM_TWO_QUEUES, nodes=1, options=PAPER)
    fed.submit("gm-1", job("a", "qa", 3))
    fed.submit("gm-1", job("b", "qb", 3))
    fed.drain()
    assert placed_users(fed) == ["qa", "qb"] * 3


# -- (b) own usage from the GM's own launches and the LMs' answers ---------------------------


TWO_GMS = [UserQueue("u1", 0.5, "gm-1"), UserQueue("u2", 0.5, "gm-2")]


def started(fed: Federation) -> Federation:
    heartbeat(fed)
    return fed


def test_own_usage_counts_launches_before_any_heartbeat() -> None:
    fed = started(federation(TWO_GMS, nodes=4))  # fair_share_paper: own_usage = launches
    gm = fed.gms["gm-1"]
    fed.submit("gm-1", job("j", "u1", 2))
    assert gm.placer.usage()["u1"] == (0.5, 0.5)  # placing: counted at once
    fed.run_until_quiet()  # accepted and started; no heartbeat delivered since
    assert gm.placer.usage()["u1"] == (0.5, 0.5)
    fed.finish(next(iter(fed.executing)))
    fed.run_until_quiet()  # the finish's task event; no tick, so no heartbeat
    assert gm.placer.usage()["u1"] == (0.25, 0.25)


def test_heartbeat_usage_waits_for_the_next_heartbeat() -> None:
    fed = started(federation(TWO_GMS, nodes=4, fairness="fair_share"))
    gm = fed.gms["gm-1"]
    fed.submit("gm-1", job("j", "u1", 2))
    fed.run_until_quiet()
    assert gm.placer.usage().get("u1", (0.0, 0.0)) == (0.0, 0.0)  # launched, not yet heard of
    heartbeat(fed)
    assert gm.placer.usage()["u1"] == (0.5, 0.5)


def refused_repartition(options: FairnessOptions | None) -> Federation:
    """Two nodes, one in each GM's partition. gm-1 places job j's t0 on its own node, t1 on
    gm-2's (a repartition) and t2 nowhere; gm-2's own launch reaches the LM first, so the LM
    refuses t1."""
    fed = started(federation(TWO_GMS, nodes=2, options=options))
    fed.submit("gm-2", job("theirs", "u2", 1))
    fed.submit("gm-1", job("j", "u1", 3))
    first = next(i for i, m in enumerate(fed.network)
                 if isinstance(m.event, LaunchRequested) and m.event.gm == "gm-2")
    fed.deliver(first)
    # gm-1's repartition leaves after its launch's answer (one request in flight per LM)
    assert [m.event.kind for m in fed.network if isinstance(m.event, LaunchRequested)] == [
        RequestKind.LAUNCH]
    return fed


def test_own_usage_follows_the_lms_refusal() -> None:
    fed = refused_repartition(None)
    gm = fed.gms["gm-1"]
    assert gm.placer.usage()["u1"] == (1.0, 1.0)  # t0 and t1 placing
    fed.run_until_quiet()
    requeued = [log.fields for _, log in fed.logs if log.event == "task_requeued"]
    assert [fields["task"] for fields in requeued] == ["j/1"]
    assert gm.counters[f"launch_refused_total.{requeued[0]['reason']}"] == 1  # an LM's no
    assert gm.placer.usage()["u1"] == (0.5, 0.5)  # the refusal took t1 back out


# -- (c) where a refused task goes -----------------------------------------------------------


def pending_order(fed: Federation) -> list[str]:
    return [task.spec.task_id for task in fed.gms["gm-1"].jobs["j"].pending]


def test_a_refused_task_goes_to_the_tail_of_its_jobs_queue_as_the_paper() -> None:
    fed = refused_repartition(None)
    fed.run_until_quiet()
    assert pending_order(fed) == ["j/2", "j/1"]


def test_a_refused_task_goes_to_the_front_with_todays_option() -> None:
    fed = refused_repartition(FairnessOptions(refused="front"))
    fed.run_until_quiet()
    assert pending_order(fed) == ["j/1", "j/2"]
    fed = refused_repartition(REFINED)
    fed.run_until_quiet()
    assert pending_order(fed) == ["j/1", "j/2"]


# -- (d) no anti-oscillation, single-resource usage -------------------------------------------


def test_the_papers_rule_preempts_without_the_anti_oscillation_check() -> None:
    queues = [UserQueue("a", 0.5, "g1"), UserQueue("b", 0.5, "g2")]
    usage = {"a": (0.45, 0.0), "b": (0.55, 0.0)}
    today, paper = FairShare(queues), FairShare(queues, PAPER)
    # a task of 0.2 takes a past its share, and b below its own: today waits, the paper not
    assert today.victim_queues("a", usage, demand=(0.2, 0.0)) == []
    assert paper.victim_queues("a", usage, demand=(0.2, 0.0)) == ["b"]
    assert not today.may_take("b", usage, freed=(0.2, 0.0))
    assert paper.may_take("b", usage, freed=(0.2, 0.0))


def test_the_papers_usage_is_cpu_alone_today_the_dominant_share() -> None:
    queues = [UserQueue("a", 0.5, "g1"), UserQueue("b", 0.5, "g2")]
    usage = {"a": (0.1, 0.6), "b": (0.6, 0.1)}  # a is memory-heavy
    assert FairShare(queues).victim_queues("a", usage) == []  # dominant 0.6: above its share
    assert FairShare(queues, PAPER).victim_queues("a", usage) == ["b"]
    assert FairShare(queues, FairnessOptions(usage="cpu")).victim_queues("a", usage) == ["b"]


# -- the federation file ------------------------------------------------------------------------


def policies_file(policies: str) -> str:
    return one_gm_file(f"[policies]\n{policies}")


def options_of(policies: str) -> FairnessOptions:
    return load_federation(policies_file(policies)).gm_config("g1").fairness_options


def test_the_file_selects_the_paper_todays_default_or_any_mix() -> None:
    assert options_of("") == REFINED
    assert options_of('fairness = "fair_share_paper"') == PAPER
    assert options_of('fairness = "fair_share"\n[policies.fairness_options]\n'
                      'queue_order = "round_robin"') == FairnessOptions(queue_order="round_robin")
    # a key set over the paper's defaults changes that one alone
    assert options_of('fairness = "fair_share_paper"\n[policies.fairness_options]\n'
                      'anti_oscillation = true\nusage = "dominant"') == FairnessOptions(
        "round_robin", "launches", "tail", True, "dominant")
    for key, value in (("own_usage", '"heartbeats"'), ("refused", '"front"')):
        chosen = options_of(f'fairness = "fair_share_paper"\n[policies.fairness_options]\n'
                            f'{key} = {value}')
        assert getattr(chosen, key) == value.strip('"')


def test_the_gm_carries_out_the_options_it_is_given() -> None:
    federation_file = load_federation(policies_file('fairness = "fair_share_paper"'))
    fed = Federation(make_topologies(1, 2, ["g1"]), [federation_file.gm_config("g1")])
    gm = fed.gms["g1"]
    assert gm._backlog.round_robin and gm._backlog.refused_to_tail
    assert gm.placer.estimate.own is not None and not gm.fairness.options.anti_oscillation


@pytest.mark.parametrize("line,field,words", [
    ('queue_order = "fifo"', "policies.fairness_options.queue_order",
     "must be one of 'job_policy', 'round_robin', got 'fifo'"),
    ('own_usage = "both"', "policies.fairness_options.own_usage", "'launches'"),
    ('refused = "middle"', "policies.fairness_options.refused", "'tail'"),
    ('usage = "memory"', "policies.fairness_options.usage", "'dominant', 'cpu'"),
    ('anti_oscillation = "no"', "policies.fairness_options.anti_oscillation",
     "must be true or false"),
    ('round_robin = true', "policies.fairness_options.round_robin", "unknown key"),
])
def test_a_bad_option_is_refused_by_name(line: str, field: str, words: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        load_federation(policies_file(f"[policies.fairness_options]\n{line}"))
    assert caught.value.field == field
    assert words in caught.value.message


def test_options_built_in_code_are_checked_too() -> None:
    with pytest.raises(InvalidInput) as caught:
        FairnessOptions(refused="later")
    assert caught.value.field == "fairness_options.refused"


def test_the_paper_preempts_across_and_within_a_gm_with_its_books_checked() -> None:
    """c fills the cluster; b (on c's GM) and a (on the other) each take back their share by
    preemption. The harness checks every core's invariants after every event, the own book
    (exactly the GM's active tasks, victims in flight not counted twice) among them."""
    queues = [UserQueue("a", 0.5, "gm-1"), UserQueue("b", 0.25, "gm-2"),
              UserQueue("c", 0.25, "gm-2")]
    fed = started(federation(queues, nodes=4))
    fed.submit("gm-2", job("hog", "c", 4))
    fed.run_until_quiet()
    heartbeat(fed)
    fed.submit("gm-2", job("mine", "b", 1))  # c's own GM preempts c for b
    fed.run_until_quiet()
    heartbeat(fed)
    fed.submit("gm-1", job("theirs", "a", 2))  # and gm-1 takes a's half from c
    fed.run_until_quiet()
    preempted = [log.fields for _, log in fed.logs if log.event == "preemption_requested"]
    assert [fields["user"] for fields in preempted] == ["b", "a", "a"]
    assert fed.gms["gm-2"].placer.usage()["c"] == (0.25, 0.25)
    fed.drain()
    assert {e.job_id for e in fed.ended_jobs} == {"hog", "mine", "theirs"}


def test_a_gms_first_log_line_names_the_variant_it_runs():
    """`gm_starting` carries the resolved options, so a log says which Algorithm 2 made it."""
    from common.startlog import gm_starting

    federation = load_federation(policies_file(
        'fairness = "fair_share_paper"\n[policies.fairness_options]\nrefused = "front"\n'))
    fields = gm_starting(federation, "g1", 0)
    assert fields["policies"]["fairness"] == "fair_share_paper"
    assert fields["fairness_options"] == {**dataclasses.asdict(PAPER), "refused": "front"}
