"""`megha inspect` on hand-made logs whose every figure is worked out by hand below."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from common.errors import InvalidInput
from inspection.analysis import RunAnalysis, size_class
from inspection.command import analyse, parse_run
from inspection.compare import compare
from inspection.reader import ReadCounts, events_of_lines, parse_event

ROOT = Path(__file__).resolve().parents[2]


def ev(ts: float, svc: str, event: str, **fields) -> dict:
    return {"ts": ts, "svc": svc, "event": event, **fields}


def task(attempt: str, **extra) -> dict:
    job, _, rest = attempt.partition("/")
    return {"attempt": attempt, "task": f"{job}/{rest.split('#')[0]}", "job": job} | extra


# Job j1 of u1 (2 tasks) arrives at 100.0; j2 of u2 (1 task) at 101.0.
#   j1/0, attempt #1: placed 100.010 (GM 2 ms), launched 100.030 (LM 1 ms), started at once
#       100.050 (worker 0.5 ms): allocation 50 ms = queuing 8 + processing 3.5 +
#       communication (100.029 - 100.010) + (100.0495 - 100.030) = 38.5 + worker queue 0.
#   j1/1, attempt #1 refused by the LM (stale view) and requeued; attempt #2 placed 100.200
#       (2 ms), launched 100.220 (1 ms), queued at the worker 100.240 (1 ms), started 100.400:
#       allocation 400 ms = queuing 198 + processing 4 + communication 38 + worker queue 160.
#   j2/0: placed 101.100 (1 ms), launched 101.200 (1 ms), started 101.300 (1 ms): allocation
#       300 ms = queuing 99 + processing 3 + communication 198 + worker queue 0.
# JCT: j1 done at 102.5 -> 2.5 s, longest task 2.0 s -> slowdown 1.25; j2 done 102.4 -> 1.4 s,
#   slowdown 1.4. Cpu held (4 cores): u1 1000 m over [100.03, 102.03] and [100.22, 101.4],
#   u2 2000 m over [101.2, 102.3]; span 100.03 .. 102.3 = 2.27 s: mean shares
#   u1 3180 / 2.27 / 4000 = 0.35022, u2 2200 / 2.27 / 4000 = 0.24229.
EVENTS = [
    ev(99.0, "gm-1", "gm_starting", gm="gm-1", shares={"u1": 0.5, "u2": 0.5},
       policies={"job": "fifo", "fairness": "fair_share"}),
    ev(99.0, "lm-1", "lm_started", lm="lm-1", nodes=2, cpu_m=4000, mem_mib=8192),
    ev(100.0, "gm-1", "job_arrived", job="j1", user="u1", tasks=2, arrival=100.0),
    ev(101.0, "gm-1", "job_arrived", job="j2", user="u2", tasks=1, arrival=101.0),
    ev(100.010, "gm-1", "task_placed", **task("j1/0#1"), user="u1", handle_s=0.002),
    ev(100.030, "lm-1", "task_launched", **task("j1/0#1"), user="u1", cpu_m=1000,
       handle_s=0.001),
    ev(100.050, "lm-1/w0", "task_started", **task("j1/0#1"), user="u1", worker="lm-1/w0",
       duration=2.0, handle_s=0.0005),
    ev(100.010, "gm-1", "task_placed", **task("j1/1#1"), user="u1", handle_s=0.002),
    ev(100.020, "lm-1", "launch_refused", **task("j1/1#1"), user="u1", reason="stale_view"),
    ev(100.025, "gm-1", "task_requeued", task="j1/1", job="j1", reason="stale_view"),
    ev(100.200, "gm-1", "task_placed", **task("j1/1#2"), user="u1", handle_s=0.002),
    ev(100.220, "lm-1", "task_launched", **task("j1/1#2"), user="u1", cpu_m=1000,
       handle_s=0.001),
    ev(100.240, "lm-1/w0", "task_queued", **task("j1/1#2"), user="u1", worker="lm-1/w0",
       handle_s=0.001),
    ev(100.400, "lm-1/w0", "task_started", **task("j1/1#2"), user="u1", worker="lm-1/w0",
       duration=1.0, handle_s=0.002),
    ev(101.100, "gm-1", "task_placed", **task("j2/0#1"), user="u2", handle_s=0.001),
    ev(101.200, "lm-1", "task_launched", **task("j2/0#1"), user="u2", cpu_m=2000,
       handle_s=0.001),
    ev(101.300, "lm-1/w1", "task_started", **task("j2/0#1"), user="u2", worker="lm-1/w1",
       duration=1.0, handle_s=0.001),
    ev(101.150, "lm-1", "repartition", **task("j2/0#1"), user="u2", from_gm="gm-2"),
    ev(101.160, "gm-1", "preemption_requested", **task("j2/0#1"), user="u2", victims=[]),
    ev(101.170, "lm-1", "preemption_refused", **task("j2/0#1"), user="u2", reason="gone"),
    ev(101.400, "lm-1/w0", "task_finished", **task("j1/1#2"), user="u1", worker="lm-1/w0"),
    ev(101.400, "lm-1", "task_finished", **task("j1/1#2"), user="u1"),
    ev(102.030, "lm-1", "task_finished", **task("j1/0#1"), user="u1"),
    ev(102.300, "lm-1", "task_finished", **task("j2/0#1"), user="u2"),
    ev(102.300, "lm-1", "task_lost", **task("jx/0#1"), user="u2"),
    ev(102.4, "gm-1", "job_done", job="j2", user="u2", tasks=1, arrival=101.0),
    ev(102.5, "gm-1", "job_done", job="j1", user="u1", tasks=2, arrival=100.0),
]


def report_of(events) -> dict:
    run = RunAnalysis("hand")
    for event in events:
        run.feed(event)
    return run.report()


def test_every_figure_of_the_hand_made_log():
    report = report_of(EVENTS)
    allocation = report["allocation"]["overall"]
    assert allocation["count"] == 3
    assert allocation["p50"] == pytest.approx(0.300)
    assert allocation["mean"] == pytest.approx(0.250)
    assert allocation["max"] == pytest.approx(0.400)
    assert report["allocation"]["by_user"]["u1"]["count"] == 2
    assert report["allocation"]["by_user"]["u2"]["p50"] == pytest.approx(0.300)
    assert set(report["allocation"]["by_size"]) == {"1 task", "2-10 tasks"}

    breakdown = report["breakdown"]
    assert breakdown["tasks"] == 3 and breakdown["incomplete"] == 0
    means = breakdown["mean_s"]
    assert means["framework_queuing"] == pytest.approx((0.008 + 0.198 + 0.099) / 3)
    assert means["processing"] == pytest.approx((0.0035 + 0.004 + 0.003) / 3)
    assert means["communication"] == pytest.approx((0.0385 + 0.038 + 0.198) / 3)
    assert means["worker_queuing"] == pytest.approx(0.160 / 3)
    assert sum(means.values()) == pytest.approx(allocation["mean"])  # the parts add up
    assert sum(breakdown["share"].values()) == pytest.approx(1.0)

    jct = report["jct"]
    assert jct["overall"]["mean"] == pytest.approx((2.5 + 1.4) / 2)
    assert jct["slowdown"]["max"] == pytest.approx(1.4)
    assert jct["slowdown"]["mean"] == pytest.approx((1.25 + 1.4) / 2)

    counts = report["counts"]
    assert counts["jobs_arrived"] == 2 and counts["jobs_done"] == 2
    assert counts["launches"] == 3 and counts["launches_refused"] == 1
    assert counts["launches_refused_by_reason"] == {"stale_view": 1}
    assert counts["requeues"] == 1 and counts["repartitions"] == 1
    assert counts["preemption_attempts"] == 1 and counts["preemptions_refused"] == 1
    assert counts["preemptions"] == 0 and counts["tasks_lost"] == 1

    fairness = report["fairness"]
    assert fairness["capacity_cpu_m"] == 4000
    assert fairness["configured"] == {"u1": 0.5, "u2": 0.5}
    assert fairness["mean_share"]["u1"] == pytest.approx(3180 / 2.27 / 4000)
    assert fairness["mean_share"]["u2"] == pytest.approx(2200 / 2.27 / 4000)
    assert max(fairness["series"]["users"]["u1"]) == pytest.approx(0.5)  # two tasks at once
    assert report["policies"] == {"job": "fifo", "fairness": "fair_share"}


def rounded(value, digits: int = 9):
    """The report with floats rounded: sums taken in another order differ in the last bit."""
    if isinstance(value, dict):
        return {key: rounded(item, digits) for key, item in value.items()}
    if isinstance(value, list):
        return [rounded(item, digits) for item in value]
    return round(value, digits) if isinstance(value, float) else value


def test_the_order_of_the_lines_does_not_matter():
    expected = rounded(report_of(EVENTS))
    rng = random.Random(3)
    for _ in range(20):
        shuffled = EVENTS[:]
        rng.shuffle(shuffled)
        assert rounded(report_of(shuffled)) == expected


def test_a_task_without_every_event_counts_but_is_not_split():
    cut = [e for e in EVENTS if not (e["event"] == "task_launched" and e["job"] == "j2")]
    report = report_of(cut)
    assert report["allocation"]["overall"]["count"] == 3
    assert report["breakdown"]["tasks"] == 2 and report["breakdown"]["incomplete"] == 1


def test_malformed_lines_are_counted_never_fatal():
    lines = [json.dumps(EVENTS[2]), "garbage", '{"ts": "x", "svc": "a", "event": "b"}',
             '{"ts": 1.0, "svc": "gm-1", "event": "job_arr', "[1, 2]",
             "gm-1  | " + json.dumps(EVENTS[3]),  # docker compose logs, with its prefix
             "\x1b[36mgm-1  |\x1b[0m " + json.dumps(EVENTS[4])]
    counts = ReadCounts()
    events = list(events_of_lines(lines, "x.log", counts))
    assert [e["event"] for e in events] == ["job_arrived", "job_arrived", "task_placed"]
    assert counts.malformed == 4 and counts.lines == 7
    assert counts.examples[0] == "x.log:2: no JSON object on the line"
    assert "no numeric ts" in counts.examples[1] and "not JSON" in counts.examples[2]
    assert isinstance(parse_event('{"ts": NaN, "svc": "a", "event": "b"}'), str)  # refused
    assert parse_event('{"ts": "1", "svc": "a", "event": "b"}') == "no numeric ts"
    # an event missing the fields its handler needs is counted, not a crash
    run = RunAnalysis("x")
    run.feed({"ts": 1.0, "svc": "gm-1", "event": "task_placed"})
    assert run.report()["counts"]["events_missing_fields"] == 1


def test_runs_are_named_and_read_from_files_and_directories(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "gm-1.log").write_text("".join(json.dumps(e) + "\n" for e in EVENTS[:10]))
    (logs / "lm-1.log").write_text("".join(json.dumps(e) + "\n" for e in EVENTS[10:]) + "x\n")
    report, read = analyse("hand", [str(logs)])
    assert read == {"lines": len(EVENTS) + 1, "events": len(EVENTS), "malformed": 1,
                    "examples": [f"{logs / 'lm-1.log'}:{len(EVENTS) - 9}: no JSON object on "
                                 f"the line"]}
    assert report["allocation"]["overall"] == report_of(EVENTS)["allocation"]["overall"]
    assert parse_run("base=a.log,b.log", 1) == ("base", ["a.log", "b.log"])
    assert parse_run("logs/run-2/", 1) == ("run-2", ["logs/run-2/"])
    assert parse_run("-", 1) == ("stdin", ["-"])
    with pytest.raises(InvalidInput, match="no such file"):
        analyse("x", [str(tmp_path / "missing.log")])
    (tmp_path / "empty.log").write_text("nothing here\n")
    with pytest.raises(InvalidInput, match="no event lines"):
        analyse("x", [str(tmp_path / "empty.log")])


def test_a_comparison_gives_ratios_to_the_first_run():
    base = report_of(EVENTS) | {"name": "base"}
    slower = [dict(e) for e in EVENTS]
    for e in slower:
        if e["event"] == "task_started":
            e["ts"] += 0.1
    other = report_of(slower) | {"name": "slow"}
    table = compare([base, other])
    assert table["runs"] == ["base", "slow"]
    row = next(r for r in table["rows"] if r["figure"] == "allocation mean (s)")
    assert row["ratios"] == pytest.approx([1.0, 0.35 / 0.25])
    lost = next(r for r in table["rows"] if r["figure"] == "launches refused")
    assert lost["ratios"] == [1.0, 1.0]


def test_size_classes():
    assert [size_class(n) for n in (1, 2, 10, 11, 100, 101)] == [
        "1 task", "2-10 tasks", "2-10 tasks", "11-100 tasks", "11-100 tasks", "over 100 tasks"]


def test_the_command_reads_stdin_and_prints_json(tmp_path):
    text = "".join(json.dumps(e) + "\n" for e in EVENTS) + "not an event\n"
    done = subprocess.run([sys.executable, "-m", "megha", "inspect", "-", "--json", "-"],
                          input=text, capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["runs"][0]["name"] == "stdin"
    assert result["runs"][0]["read"]["malformed"] == 1
    tables = subprocess.run([sys.executable, "-m", "megha", "inspect", "-"], input=text,
                            capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert "where allocation time goes" in tables.stdout and "malformed: stdin:" in tables.stdout
