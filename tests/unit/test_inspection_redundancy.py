"""`megha inspect` on redundant copies (docs/redundancy.md): a hand-made log whose every
redundancy figure is worked out by hand below."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

from rich.console import Console

from inspection.analysis import RunAnalysis
from inspection.command import analyse
from inspection.compare import FIGURES, REDUNDANCY_FIGURES, compare
from inspection.html import render_html
from inspection.plots import write_plots
from inspection.terminal import render_comparison, render_run

ROOT = Path(__file__).resolve().parents[2]
READ = {"events": 1, "lines": 1, "malformed": 0, "examples": []}


def lm(ts: float, event: str, **fields) -> dict:
    return {"ts": ts, "svc": "lm-1", "event": event, "lm": "lm-1", **fields}


def worker(ts: float, event: str, attempt: str, **fields) -> dict:
    job, _, rest = attempt.partition("/")
    return {"ts": ts, "svc": "lm-1/w0", "event": event, "attempt": attempt,
            "task": f"{job}/{rest.split('#')[0]}", "job": job, "worker": "lm-1/w0",
            "lm": "lm-1", "gm": "gm-1", "user": "u1", **fields}


def copy_line(ts: float, event: str, attempt: str, **fields) -> dict:
    original = attempt.split("~")[0]
    job, _, rest = original.partition("/")
    return lm(ts, event, attempt=attempt, original=original,
              task=f"{job}/{rest.split('#')[0]}", job=job, gm="gm-1", user="u1",
              node="lm-1/n9", **fields)


A, C1, C2 = "j1/0#1", "j1/0#1~0.1", "j1/0#1~0.2"
B, D1, D2 = "j1/1#1", "j1/1#1~0.3", "j1/1#1~0.4"
E = "j1/2#1"
F, G, H, F2 = "j2/0#1", "j2/0#1~0.5", "j2/0#1~0.6", "j2/0#2"

# Job j1 (3 tasks) arrives at 0 and is done at 6; j2 (1 task) arrives at 1, done at 5.5.
#   j1/0: original A on a slow node (duration 6, run_for 12). Copy C1 (run_for 30, slower
#     still); a checkpoint (A answers 1.0, C1 0.5; C1 restored to 1.0), then copy C2 from 1.0
#     (run_for 2.5 for the 5 left). C2 wins: copy_won by copy, 3 checkpoints. C1 is cancelled
#     (sibling_won, own work 1.0), A stopped on its worker (own work 2.0): both wasted; C2's
#     own work 5.0 is useful.
#   j1/1: original B. Copy D1 (B answers 1.5), cancelled when a GM takes its node
#     (node_taken, own work 1.0); copy D2 from 1.5 (B answers 3.0, D2 restored to 3.0). B
#     finishes first (own work 5.0, useful): copy_won by the original, 2 checkpoints. D2 is
#     cancelled (sibling_won) but finishes on its worker before the cancel arrives
#     (copy_finished_late, own work 3.0: wasted all the same).
#   j1/2: original E, no copies: own work 3.0, useful.
#   j2/0: original F, copies G and H; H's node goes down (node_down, no worker line); F is
#     preempted: G cancelled (original_ended, own work 0.5, wasted); F's own work 1.0 on its
#     cancel is neither (it lost to no copy). Its next attempt F2 finishes: own work 2.0.
# So: 6 copies launched for 3 tasks; 5 cancelled (sibling_won 2, node_taken 1, node_down 1,
#   original_ended 1); 2 tasks won, 1 by a copy (share 0.5); checkpoints per task 3, 2 (mean
#   2.5, p50 2.5, max 3); 4 checkpoint answers, 2 restores, 1 late finish.
#   wasted: copies C1 1.0 + D1 1.0 + D2 3.0 + G 0.5 = 5.5, originals A 2.0: 7.5;
#   useful: C2 5.0 + B 5.0 + E 3.0 + F2 2.0 = 15.0; wasted / useful = 0.5.
#   node speed variability (run_for over the work the run does): A 12/6 = 2, C1 30/6 = 5,
#   C2 2.5/(6 - 1) = 0.5: mean 2.5, p50 2, max 5.
#   slowdown: a copy does not make its job longer: j1 6 / 12 (A) = 0.5 (with C1's 30 it
#   would be 0.2), j2 4.5 / 2 = 2.25; mean 1.375.
EVENTS = [
    {"ts": -1.0, "svc": "gm-1", "event": "gm_starting", "gm": "gm-1", "shares": {"u1": 1.0},
     "policies": {"job": "fifo", "redundancy": "srpt+r"}},
    {"ts": 0.0, "svc": "gm-1", "event": "job_arrived", "gm": "gm-1", "job": "j1",
     "user": "u1", "tasks": 3, "arrival": 0.0},
    {"ts": 1.0, "svc": "gm-1", "event": "job_arrived", "gm": "gm-1", "job": "j2",
     "user": "u1", "tasks": 1, "arrival": 1.0},
    # j1/0
    worker(0.1, "task_started", A, duration=6.0, run_for=12.0),
    copy_line(1.0, "copy_launched", C1, start_work=0.0, copies=1),
    worker(1.1, "task_started", C1, duration=6.0, copy_of=A, run_for=30.0),
    worker(2.0, "task_checkpointed", A, work_done=1.0),
    worker(2.0, "task_checkpointed", C1, work_done=0.5),
    worker(2.1, "task_restored", C1, from_work=0.5, to_work=1.0, run_for=25.0),
    copy_line(2.0, "copy_launched", C2, start_work=1.0, copies=2),
    worker(2.1, "task_started", C2, duration=6.0, copy_of=A, start_work=1.0, run_for=2.5),
    worker(4.6, "task_finished", C2, runtime=2.5, own_work=5.0),
    lm(4.7, "copy_won", original=A, winner=C2, by_copy=True, node="lm-1/n2", copies=2,
       checkpoints=3, best_work=1.0, runtime=4.6),
    copy_line(4.7, "copy_cancelled", C1, why="sibling_won"),
    lm(4.7, "task_finished", attempt=A, task="j1/0", job="j1", gm="gm-1", user="u1",
       runtime=4.6, detail=f"won by copy {C2}"),
    worker(4.8, "task_cancelled", C1, reason="cancelled", was="running", work_done=2.0,
           own_work=1.0),
    worker(4.8, "task_cancelled", A, reason="cancelled", was="running", work_done=2.0,
           own_work=2.0),
    # j1/1
    worker(0.1, "task_started", B, duration=5.0),
    copy_line(1.0, "copy_launched", D1, start_work=0.0, copies=1),
    worker(1.1, "task_started", D1, duration=5.0, copy_of=B),
    worker(1.1, "task_checkpointed", B, work_done=1.5),
    copy_line(2.0, "copy_cancelled", D1, why="node_taken"),
    worker(2.1, "task_cancelled", D1, reason="cancelled", was="running", work_done=1.0,
           own_work=1.0),
    copy_line(3.0, "copy_launched", D2, start_work=1.5, copies=1),
    worker(3.1, "task_started", D2, duration=5.0, copy_of=B, start_work=1.5),
    worker(3.1, "task_checkpointed", B, work_done=3.0),
    worker(3.2, "task_restored", D2, from_work=1.6, to_work=3.0),
    worker(5.1, "task_finished", B, runtime=5.0, own_work=5.0),
    lm(5.2, "task_finished", attempt=B, task="j1/1", job="j1", gm="gm-1", user="u1",
       runtime=5.0),
    lm(5.2, "copy_won", original=B, winner=B, by_copy=False, node=None, copies=2,
       checkpoints=2, best_work=3.0, runtime=5.1),
    copy_line(5.2, "copy_cancelled", D2, why="sibling_won"),
    worker(5.2, "task_finished", D2, runtime=2.1, own_work=3.0),
    lm(5.3, "copy_finished_late", attempt=D2, original=B),
    worker(5.3, "worker_unknown_attempt", D2, stimulus="task_cancelled"),
    # j1/2
    worker(0.1, "task_started", E, duration=3.0),
    worker(3.1, "task_finished", E, runtime=3.0, own_work=3.0),
    lm(3.2, "task_finished", attempt=E, task="j1/2", job="j1", gm="gm-1", user="u1",
       runtime=3.0),
    {"ts": 6.0, "svc": "gm-1", "event": "job_done", "gm": "gm-1", "job": "j1", "user": "u1",
     "tasks": 3, "arrival": 0.0},
    # j2/0
    worker(1.1, "task_started", F, duration=2.0),
    copy_line(1.5, "copy_launched", G, start_work=0.0, copies=1),
    copy_line(1.5, "copy_launched", H, start_work=0.0, copies=2),
    worker(1.6, "task_started", G, duration=2.0, copy_of=F),
    copy_line(1.8, "copy_cancelled", H, why="node_down"),
    lm(2.0, "task_preempted", attempt=F, task="j2/0", job="j2", gm="gm-1", user="u1"),
    copy_line(2.0, "copy_cancelled", G, why="original_ended"),
    worker(2.1, "task_cancelled", G, reason="cancelled", was="running", work_done=0.5,
           own_work=0.5),
    worker(2.1, "task_cancelled", F, reason="preempted", was="running", work_done=1.0,
           own_work=1.0),
    worker(3.0, "task_started", F2, duration=2.0),
    worker(5.0, "task_finished", F2, runtime=2.0, own_work=2.0),
    lm(5.1, "task_finished", attempt=F2, task="j2/0", job="j2", gm="gm-1", user="u1",
       runtime=2.0),
    {"ts": 5.5, "svc": "gm-1", "event": "job_done", "gm": "gm-1", "job": "j2", "user": "u1",
     "tasks": 1, "arrival": 1.0},
]

LINES = [
    "6 copies launched for 3 tasks; 5 cancelled: sibling won 2, node taken 1, node down 1, "
    "original ended 1",
    "2 tasks with copies finished: 1 won by a copy (50.0%), 1 by the original",
    "checkpoints per task: mean 2.50, p50 2.5, max 3; 4 checkpoint answers, 2 restores",
    "copies that finished after their cancel: 1",
    "wasted work 7.5 s (copies 5.5 s, beaten originals 2.0 s), 50.0% of the useful 15.0 s",
]


def without_copies() -> list[dict]:
    """The same jobs as a run without redundancy logs them: no copy, checkpoint or restore
    line, no copy's start or end, no copy_won."""
    copies = {C1, C2, D1, D2, G, H}
    return [e for e in EVENTS if e.get("attempt") not in copies and not e["event"].startswith(
        ("copy_", "task_checkpointed", "task_restored"))]


def report_of(events: list[dict], name: str = "srpt+r") -> dict:
    run = RunAnalysis(name)
    for event in events:
        run.feed(event)
    return run.report()


def test_every_redundancy_figure_of_the_hand_made_log():
    report = report_of(EVENTS)
    assert report["redundancy"] == {
        "copies_launched": 6,
        "copies_cancelled": 5,
        "cancelled_by_why": {"sibling_won": 2, "node_taken": 1, "node_down": 1,
                             "original_ended": 1},
        "tasks_with_copies": 3,
        "tasks_won": 2,
        "wins_by_copy": 1,
        "wins_by_original": 1,
        "wins_by_copy_share": 0.5,
        "checkpoints_per_task": {"count": 2, "mean": 2.5, "p50": 2.5, "max": 3},
        "checkpoint_answers": 4,
        "restores": 2,
        "late_finishes": 1,
        "useful_work": 15.0,
        "wasted_work": 7.5,
        "wasted_work_by": {"copies": 5.5, "originals": 2.0},
        "wasted_work_share": 0.5,
    }
    counts = report["counts"]
    assert (counts["copies_launched"], counts["copies_cancelled"]) == (6, 5)
    assert counts["preemptions"] == 1 and counts["events_missing_fields"] == 0
    # copies share their original's task: one first start per task, the original's
    assert counts["tasks_started"] == 4
    variability = report["variability"]
    assert (variability["count"], variability["mean"], variability["p50"],
            variability["max"]) == (3, 2.5, 2.0, 5.0)
    slowdown = report["jct"]["slowdown"]
    assert (slowdown["count"], slowdown["mean"], slowdown["max"]) == (2, 1.375, 2.25)
    json.dumps(report)  # every figure is JSON


def test_the_order_of_the_lines_does_not_matter():
    expected = report_of(EVENTS)["redundancy"]
    rng = random.Random(7)
    for _ in range(20):
        shuffled = EVENTS[:]
        rng.shuffle(shuffled)
        # every work figure is a sum of binary fractions: exact in any order
        assert report_of(shuffled)["redundancy"] == expected


def test_a_log_without_copies_has_no_redundancy_section():
    plain = report_of(without_copies(), "none")
    assert "redundancy" not in plain
    assert set(plain) == {"name", "policies", "allocation", "breakdown", "jct", "counts",
                          "fairness", "variability"}
    assert (plain["counts"]["copies_launched"], plain["counts"]["copies_cancelled"]) == (0, 0)
    table = compare([plain, plain | {"name": "again"}])
    assert [row["figure"] for row in table["rows"]] == [label for label, _ in FIGURES]
    console = Console(record=True, width=120)
    render_run(console, plain, READ)
    assert "Redundant copies" not in console.export_text()
    assert "copies_cancelled" not in write_plots({"runs": [plain]}, None)


def test_a_copy_won_alone_makes_the_section():
    # a log cut so that only the LM's end of a task with copies is left
    report = report_of([lm(1.0, "copy_won", original=A, winner=C2, by_copy=True,
                           node="lm-1/n2", copies=4, checkpoints=5, best_work=1.0,
                           runtime=None)])
    redundancy = report["redundancy"]
    assert (redundancy["copies_launched"], redundancy["tasks_won"],
            redundancy["wins_by_copy_share"]) == (0, 1, 1.0)
    assert redundancy["checkpoints_per_task"] == {"count": 1, "mean": 5.0, "p50": 5.0,
                                                  "max": 5}
    assert (redundancy["useful_work"], redundancy["wasted_work"],
            redundancy["wasted_work_share"]) == (0.0, 0.0, None)


def test_lines_missing_fields_are_counted_not_half_taken():
    run = RunAnalysis("x")
    run.feed(lm(1.0, "copy_won", original=A, winner=C2, copies=2, checkpoints=3))  # by_copy
    run.feed(lm(1.0, "copy_launched", attempt=C1))  # no original
    run.feed(lm(1.0, "copy_won", original=B, winner=B, by_copy=False, checkpoints="x"))
    report = run.report()
    assert report["counts"]["events_missing_fields"] == 3
    assert report["counts"]["copies_launched"] == 0
    assert "redundancy" not in report


def test_a_copy_is_known_from_its_workers_start_alone():
    # without the LM's lines of copy G, its worker's start (copy_of) still makes its
    # cancelled work wasted
    events = [e for e in EVENTS if not (e["event"].startswith("copy_")
                                        and e.get("attempt") == G)]
    redundancy = report_of(events)["redundancy"]
    assert redundancy["wasted_work_by"] == {"copies": 5.5, "originals": 2.0}
    assert redundancy["tasks_with_copies"] == 3
    assert (redundancy["copies_launched"], redundancy["copies_cancelled"]) == (5, 4)


def test_terminal_comparison_html_and_plot_show_redundancy(tmp_path):
    red = report_of(EVENTS, "srpt+r") | {"read": READ}
    plain = report_of(without_copies(), "none") | {"read": READ}
    console = Console(record=True, width=120)
    render_run(console, red, READ)
    text = console.export_text()
    assert "Redundant copies" in text
    for line in LINES:
        assert f"  {line}\n" in text

    table = compare([plain, red])
    rows = {row["figure"]: row for row in table["rows"]}
    assert [row["figure"] for row in table["rows"]] == [
        label for label, _ in FIGURES + REDUNDANCY_FIGURES]
    assert rows["copies launched"]["values"] == [None, 6]
    assert rows["wins by copy share"]["values"] == [None, 0.5]
    assert rows["wasted work share"]["values"] == [None, 0.5]
    assert rows["wasted work share"]["ratios"] == [None, None]  # no baseline to divide by
    both = compare([red, red | {"name": "again"}])
    assert {row["figure"]: row for row in both["rows"]}["copies launched"]["ratios"] == [
        1.0, 1.0]
    console = Console(record=True, width=160)
    render_comparison(console, table)
    text = console.export_text()
    for label in ("copies launched", "wins by copy share", "wasted work share"):
        assert label in text

    result = {"runs": [plain, red], "comparison": table}
    pngs = write_plots(result, tmp_path / "plots")
    assert pngs["copies_cancelled"].startswith(b"\x89PNG")
    assert (tmp_path / "plots" / "copies_cancelled.png").stat().st_size > 1000
    page = render_html(result, pngs)
    assert 'id="redundancy-srpt+r"' in page and 'id="redundancy-none"' not in page
    assert 'id="copies-cancelled-srpt+r"' in page and "<td>original ended</td>" in page
    assert 'id="plot-copies_cancelled"' in page and "wasted work share" in page
    assert LINES[4] in page


def test_the_command_reads_the_log_and_reports_redundancy_as_json(tmp_path):
    path = tmp_path / "srpt+r.log"
    path.write_text("".join(json.dumps(e) + "\n" for e in EVENTS))
    assert analyse("srpt+r", [str(path)])[0]["redundancy"]["wasted_work"] == 7.5
    done = subprocess.run([sys.executable, "-m", "megha", "inspect", str(path), "--json", "-"],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 0, done.stderr
    redundancy = json.loads(done.stdout)["runs"][0]["redundancy"]
    assert redundancy["cancelled_by_why"] == {"sibling_won": 2, "node_taken": 1,
                                              "node_down": 1, "original_ended": 1}
    assert redundancy["wasted_work_share"] == 0.5
    done = subprocess.run([sys.executable, "-m", "megha", "inspect", str(path)],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 0, done.stderr
    assert LINES[0] in done.stdout and LINES[4] in done.stdout
