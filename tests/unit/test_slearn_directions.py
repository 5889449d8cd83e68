"""The SLearn paper's headline in its direction, at a size CI can afford: SLearn's mean JCT
and 3Sigma's (trained on the workload's first half, as the paper's) are both below FIFO's.
A change that flips either fails here."""

from __future__ import annotations

import json

from megha.cli import main

# the experiment's `drifting` workload (simulator/experiments/slearn.py), 300 jobs measured
DRIFTING = ["--poisson", "1.0", "--families", "60", "--recurring-share", "0.8",
            "--width", "choice:1,1,2,3,5,10,20,50,100,200", "--duration", "lognormal:20,1.5",
            "--task-cov", "0.3", "--job-cov", "0.2", "--drift-share", "0.5",
            "--drift-factor", "4", "--count", "300", "--target-load", "1.2"]


def test_slearn_and_trained_3sigma_finish_jobs_sooner_than_fifo(tmp_path):
    """The paper's Figure 6: FIFO's mean JCT is 3.29x SLearn's and 2.6x 3Sigma's (3.29 /
    1.28). Here the drifting workload's 300 measured jobs (600 built; 3sigma trained on the
    first 300) at load 1.2, since at load 1 so few jobs queue too little for any order to
    matter (at 150 jobs FIFO is only 1.1-1.3x either). Measured at seeds 0, 1 and 2: FIFO
    1.58x, 1.46x and 2.11x SLearn's mean JCT, and 1.69x, 1.58x and 2.27x 3Sigma's (at full
    size, 1,250 jobs at load 1: 2.33x SLearn's). About 12 s."""
    out = tmp_path / "slearn"
    assert main(["experiment", "slearn", *DRIFTING, "--values", "slearn,3sigma,fifo",
                 "--workers", "1", "--no-log", "--out", str(out)]) == 0
    document = json.loads((out / "workload" / "results.json").read_text())
    assert document["history"] == "trained" and document["training_jobs"] == 300
    mean = {run["name"]: run["jct"]["overall"]["mean"] for run in document["runs"]}
    assert mean["slearn"] * 1.3 < mean["fifo"], mean
    assert mean["3sigma"] * 1.3 < mean["fifo"], mean
