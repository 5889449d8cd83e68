"""`benchmarks/bench_services.py` still runs, at a toy size, against real local processes and
the real broker, and its figures add up (its full size is run by hand; see the README)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from test_federation import CONFIG, free_port_block

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

ROOT = Path(__file__).resolve().parents[2]


def test_bench_services_prints_its_figures(amqp_url):
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_services.py"), "--config", str(CONFIG),
         "--rate", "10", "--tasks", "2", "--seconds", "2", "--grace", "60",
         "--base-port", str(free_port_block(6)), "--amqp-url", amqp_url],
        capture_output=True, text=True, timeout=200, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    figures = {name: float(value) for name, value in
               re.findall(r"^(\w+)=(\S+)$", done.stdout, flags=re.MULTILINE)}
    assert figures["jobs_not_accepted"] == 0 and figures["jobs_unfinished"] == 0, done.stdout
    assert figures["tasks_per_s"] > 0 and figures["arrived_tasks_per_s"] > 0, done.stdout
    assert 0 < figures["alloc_p50_ms"] <= figures["alloc_p99_ms"], done.stdout
