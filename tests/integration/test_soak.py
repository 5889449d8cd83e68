"""`benchmarks/soak.py` at a tiny size: a replay on the small federation while a GM, an LM, a
worker agent and RabbitMQ are each killed with SIGKILL once and restarted, then checked from
the GMs' answers and the event logs: no accepted job lost, nothing completed twice, no node
over-committed. The soak runs its own RabbitMQ on a port of its own (not the shared broker the
other integration tests use), since it kills it. The full size (10 minutes) is run by hand."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest
from test_federation import CONFIG, free_port_block

from common.federation import load_federation

pytestmark = [pytest.mark.integration, pytest.mark.timeout(200)]

ROOT = Path(__file__).resolve().parents[2]
RABBITMQ_PORT = 27682  # not the soak's default (27672): a full soak may run meanwhile


def test_a_short_soak_loses_nothing_repeats_nothing_and_overcommits_nothing():
    # a kill every 8 s for 40 s: kills at 8, 16, 24 and 32 s, one round of the four kinds
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "soak.py"), "--config", str(CONFIG),
         "--seconds", "40", "--every", "8", "--seed", "3", "--rate", "2", "--tasks", "2",
         "--duration", "1.0", "--grace", "45", "--base-port", str(free_port_block(6)),
         "--rabbitmq-port", str(RABBITMQ_PORT)],
        capture_output=True, text=True, timeout=190, cwd=ROOT)
    assert done.stdout.startswith("# soak: federation"), done.stdout
    figures = {name: float(value) for name, value in
               re.findall(r"^(\w+)=(\S+)$", done.stdout, flags=re.MULTILINE)}
    report = f"{done.stdout}\n{done.stderr[-4000:]}"
    assert "soak_kills" in figures, report
    assert figures["soak_kills"] == 4, report
    for kind in ("gm", "lm", "worker", "rabbitmq"):
        assert figures[f"soak_kills_{kind}"] == 1, report
    assert figures["soak_restart_failures"] == 0, report
    assert figures["soak_jobs_accepted"] > 40, report
    assert figures["soak_jobs_lost"] == 0, report
    assert figures["soak_duplicates"] == 0, report
    assert figures["soak_overcommits"] == 0, report
    assert figures["soak_jobs_completed"] + figures["soak_jobs_failed"] \
        == figures["soak_jobs_accepted"], report
    assert done.returncode == 0, report


def _soak_module():
    """benchmarks/soak.py as a module (benchmarks/ is no package)."""
    spec = importlib.util.spec_from_file_location("soak", ROOT / "benchmarks" / "soak.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("soak", module)  # its dataclasses look their module up there
    spec.loader.exec_module(sys.modules["soak"])
    return sys.modules["soak"]


def test_the_soaks_checks_trip_on_hand_made_logs():
    # a check that a healthy run never trips must be seen tripping, or it proves nothing
    soak = _soak_module()
    federation = load_federation(CONFIG.read_text(), str(CONFIG))
    roles = {"gm-1": "gm", "lm-1": "lm", "lm-1/w0": "worker"}
    node = "lm-1/n0"  # 2000 m, 4096 MiB

    def line(svc, event, attempt=None, **fields):
        ids = {"attempt": attempt, "task": attempt.split("#")[0], "node": node} if attempt else {}
        return {"ts": 0.0, "svc": svc, "event": event, **ids, **fields}

    def launch(attempt, cpu_m=1000, mem_mib=1024):
        return line("lm-1", "task_launched", attempt, cpu_m=cpu_m, mem_mib=mem_mib)

    def check(events):
        findings = soak.Findings()
        findings.duplicates = soak.duplicates(events, roles, findings.checked)
        soak.overcommits(events, federation, roles, findings)
        return findings

    # a node filled exactly, freed, filled again; a restarted LM holds only what it adopts;
    # a task two attempts ran but whose GM counted it once; a resumption is no second start
    healthy = [launch("j/0#1"), launch("j/1#1"), line("lm-1", "task_lost", "j/0#1"),
               launch("j/0#2"), line("lm-1", "lm_started"),
               line("lm-1", "attempt_adopted", "j/0#2"),
               line("lm-1", "attempt_adopted", "j/1#1"),
               line("lm-1", "task_finished", "j/1#1"), launch("j/2#1"),
               line("lm-1/w0", "task_started", "j/0#2"),
               line("lm-1/w0", "task_started", "j/2#1"),
               line("lm-1/w0", "task_suspended", "j/2#1"),
               line("lm-1/w0", "task_started", "j/2#1", resumed=True),
               line("lm-1", "task_finished", "j/0#2"),
               line("gm-1", "task_done", "j/0#2"), line("gm-1", "task_done", "j/1#1")]
    findings = check(healthy)
    assert not any(findings.duplicates.values()) and not any(findings.overcommits.values())
    assert findings.anomalies == [] and findings.checked["lm_takes"] == 6

    over_lm = [launch("a#1"), launch("b#1"), launch("c#1", 1, 1)]
    assert [e["attempt"] for e in check(over_lm).overcommits["lm"]] == ["c#1"]
    over_memory = [launch("a#1", 1, 4000), launch("b#1", 1, 97)]
    assert len(check(over_memory).overcommits["lm"]) == 1
    # the LM's books are right, but the worker still runs what the LM took back
    over_worker = [launch("a#1", 2000), line("lm-1/w0", "task_started", "a#1"),
                   line("lm-1", "task_lost", "a#1"), launch("b#1", 2000),
                   line("lm-1/w0", "task_started", "b#1")]
    findings = check(over_worker)
    assert findings.overcommits["lm"] == [] and len(findings.overcommits["worker"]) == 1
    # ... unless the worker was restarted in between: its tasks died with it
    restarted = over_worker[:4] + [line("lm-1/w0", "worker_started"), over_worker[4]]
    assert check(restarted).overcommits["worker"] == []

    twice = [launch("t/0#1"), launch("t/0#2"), line("lm-1/w0", "task_started", "t/0#1"),
             line("lm-1/w0", "task_finished", "t/0#1"), line("lm-1/w0", "task_started",
                                                             "t/0#1"),
             line("lm-1", "task_finished", "t/0#1"), line("lm-1", "task_finished", "t/0#1"),
             line("gm-1", "task_done", "t/0#1"), line("gm-1", "task_done", "t/0#2")]
    found = check(twice).duplicates
    assert found == {"task_done": ["t/0"], "lm_finish": ["t/0#1"], "worker_start": ["t/0#1"]}
