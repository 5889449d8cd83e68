"""Size-aware job policies in the services: a named, recurring workload from `megha synth`
replayed over real HTTP to GM, LM and worker processes whose federation file chooses the
policy. SLearn's pilots run first, their measured runtimes reach the GM through the LM and
RabbitMQ, and the estimate, its queue and the true work are in the GM's event log; 3Sigma
learns from the named runs that finished before."""

from __future__ import annotations

import subprocess
import sys

import pytest
from test_federation import CONFIG, ROOT, free_port_block, read_events

from services.local import LocalFederation

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def workload(tmp_path) -> object:
    work = tmp_path / "recurring.jsonl"
    made = subprocess.run(
        [sys.executable, "-m", "megha", "synth", "--out", str(work), "--config", str(CONFIG),
         "--poisson", "4", "--count", "14", "--families", "2", "--recurring-share", "1",
         "--width", "const:6", "--duration", "const:0.3", "--task-cov", "0.1",
         "--job-cov", "0.1", "--drift-share", "0", "--cpu-m", "400", "--mem-mib", "128",
         "--unconstrained-share", "1", "--seed", "5"],
        capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert made.returncode == 0, made.stderr
    return work


@pytest.mark.parametrize("policy", ["slearn", "3sigma"])
def test_a_size_aware_policy_estimates_through_the_services(policy, tmp_path, amqp_url):
    config = tmp_path / "federation.toml"
    config.write_text(CONFIG.read_text().replace('job = "fifo"', f'job = "{policy}"'))
    work = workload(tmp_path)
    logs = tmp_path / "logs"
    with LocalFederation(config, logs, base_port=free_port_block(6), amqp_url=amqp_url) as fed:
        gms = [f"--gm={gm}={fed.endpoints.url(gm)}" for gm in fed.federation.gms]
        done = subprocess.run(
            [sys.executable, "-m", "megha", "replay", "--trace", str(work), "--config",
             str(config), *gms, "--run-id", policy, "--results", str(tmp_path / "r.json"),
             "--tokens", str(fed.tokens_file)],
            capture_output=True, text=True, timeout=180, cwd=ROOT)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "14 completed, 0 failed" in done.stdout
    events = read_events(logs)
    ended = [e for e in events if e["event"] == "job_done"]
    assert len(ended) == 14 and {e["predictor"] for e in ended} == {policy}
    for job in ended:
        assert job["work"] > 0 and job["true_level"] == 0  # 6 x 0.3 s is far below 1,000 s
    estimated = {e["job"]: e for e in events if e["event"] == "job_estimated"}
    if policy == "slearn":
        wide = [e["job"] for e in events if e["event"] == "job_arrived" and e["tasks"] >= 3]
        assert wide and set(wide) <= set(estimated)  # every wide job was sampled
        arrived = {e["job"]: e for e in events if e["event"] == "job_arrived"}
        for job in wide:
            assert arrived[job]["pilots"] == 1 and arrived[job]["sampling_ratio"] == 0.03
            # the estimate is the pilot's measured runtime times the width: near the truth
            truth = next(e["work"] for e in ended if e["job"] == job)
            assert estimated[job]["estimate"] == pytest.approx(truth, rel=0.5)
        pilots = [e for e in events if e["event"] == "task_started" and e.get("pilot")]
        assert len(pilots) >= len(wide)
    else:
        # the two families' first runs have no history; later runs are predicted from it
        assert 0 < len(estimated) < 14
