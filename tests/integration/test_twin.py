"""`megha twin` at CI size over real processes: the services (GMs, LMs, worker agents as local
processes, the project's RabbitMQ) and the simulator on one light workload, the model of time
fitted on another; the calibrated simulation stays within loose bounds of the services, and
the model it wrote drives `megha simulate --calibration`. Bad input is refused by name before
anything starts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from simulator.timemodel import HOPS, TimeModel

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[2]
SHAPE = ["--nodes", "200", "--gms", "2", "--lms", "2", "--slots"]
# light on 200 slots (a few busy at once), so allocation is the pipeline's, not a queue's
JUDGED = ["--poisson", "4", "--count", "30", "--width", "uniform:1,12", "--duration",
          "exp:0.4", "--seed", "5"]
CALIBRATE_WITH = "--poisson 5 --count 40 --width uniform:1,20 --duration exp:0.5 --constraints"


def megha(*args: str, timeout: float = 500) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "megha", *args], cwd=ROOT, text=True,
                          capture_output=True, timeout=timeout)


def test_twin_runs_three_ways_and_the_calibrated_simulation_is_close(amqp_url, tmp_path):
    # amqp_url: the session's broker is up; the twin takes a virtual host of its own on it
    out = tmp_path / "twin"
    done = megha("twin", *SHAPE, *JUDGED, "--calibrate-with", CALIBRATE_WITH, "--out",
                 str(out), "--html", str(tmp_path / "twin.html"))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    first = done.stdout.splitlines()[0]
    assert first.startswith("megha twin:") and "sim-default: delay" in first, first
    results = json.loads((out / "results.json").read_text())
    assert [run["name"] for run in results["runs"]] == ["services", "sim-default",
                                                       "sim-calibrated"]
    for run in results["runs"]:
        assert run["counts"]["jobs_done"] == 30, run["name"]
        assert run["allocation"]["overall"]["count"] == run["counts"]["tasks_started"]
        assert set(run["allocation"]["overall"]) >= {"p50", "p90", "p99"}
        assert set(run["jct"]["overall"]) >= {"mean", "p50", "p99"}
        assert "share" in run["breakdown"]["components"]
    apart = results["figures"]["divergence"]["sim-calibrated"]
    # loose at this size (a few hundred tasks, one run): the benchmark holds the real targets
    assert apart["allocation_p50"] <= 2.0, apart
    assert apart["jct_mean"] <= 1.3, apart
    default = results["figures"]["divergence"]["sim-default"]
    assert default["allocation_p50"] > apart["allocation_p50"], (default, apart)
    model = TimeModel.load(out / "calibration.json")
    assert set(model.hops) == set(HOPS) and model.source["samples"]["gm_to_lm"] >= 5
    assert "sim-calibrated" in (tmp_path / "twin.html").read_text()

    # the model drives the simulator anywhere
    sim = megha("simulate", *SHAPE, *JUDGED, "--calibration", str(out / "calibration.json"),
                "--no-log", timeout=120)
    assert sim.returncode == 0, sim.stderr[-2000:]
    assert "time model" in sim.stdout and "processing model" in sim.stdout, sim.stdout


def test_bad_input_is_refused_by_name_before_anything_starts(tmp_path):
    bad_model = tmp_path / "old.json"
    bad_model.write_text(json.dumps({"format": "megha-time-model", "version": 0}))
    for args, words in (
            (["twin", "--calibration", str(bad_model), "--out", str(tmp_path / "a")],
             "version 0"),
            (["twin", "--nodes", "20000", "--lms", "25", "--nodes-per-worker", "10",
              "--out", str(tmp_path / "b")], "processes"),
            (["twin", "--nodes", "0", "--out", str(tmp_path / "c")], "--nodes"),
            (["twin", "--calibrate-with=--poisson x", "--out", str(tmp_path / "d")],
             "--calibrate-with"),
            (["simulate", "--nodes", "10", "--gms", "1", "--lms", "1", "--calibration",
              str(bad_model), "--no-log"], "version 0")):
        done = megha(*args, timeout=60)
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        assert words in done.stderr, (args, done.stderr)
