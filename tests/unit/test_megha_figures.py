"""The Megha paper's figures as experiments, at a tiny size: `components` (Figure 7) and
`centralized` (Figure 6) run, write results.json in the shared schema with their own
figures, and the paper's figures run with modelled processing by default."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from inspection.analysis import COMPONENTS
from loadgen.paper_workloads import YH1_SUB
from megha.cli import main
from simulator.experiments.cluster_sweep import ClusterSweep
from simulator.experiments.registry import EXPERIMENTS

# the bundled trace in slot mode, whatever the figure's own default workload (the paper's,
# as a stand-in: test_paper_figures_default_to_the_papers_workloads)
BUNDLED = ["--trace", str(YH1_SUB), "--slots"]
TINY = ["--jobs", "12", "--workers", "1", "--no-log", *BUNDLED]


def results(out: Path) -> dict:
    return json.loads((out / "results.json").read_text())


def test_components_records_each_component_and_they_add_up(tmp_path):
    out = tmp_path / "components"
    assert main(["experiment", "components", "--nodes", "300", "--gms", "2", "--lms", "3",
                 "--values", "megha,megha@0.1", *TINY, "--out", str(out),
                 "--html", str(tmp_path / "c.html")]) == 0
    data = results(out)
    run = data["runs"][0]
    assert run["name"] == "megha" and {"jct", "allocation", "counts"} <= set(run)
    # services ten times faster: the same run, each service's time a tenth
    fast = data["figures"]["components"]["megha@0.1"]
    slow = data["figures"]["components"]["megha"]
    for part in ("processing_gm", "processing_lm", "processing_worker"):
        assert fast["mean_ms"][part] == pytest.approx(slow["mean_ms"][part] / 10, rel=0.05)
    assert fast["share"]["communication"] > slow["share"]["communication"]
    figures = data["figures"]["components"]["megha"]
    assert set(figures["share"]) == set(COMPONENTS)
    assert sum(figures["share"].values()) == pytest.approx(1.0)
    # over the tasks the breakdown splits (a task placed by preemption has no task_placed
    # line: it counts in the allocation figures only), as the four-part split does
    assert sum(figures["mean_ms"].values()) == pytest.approx(
        1e3 * sum(run["breakdown"]["mean_s"].values()))
    # modelled processing by default: the cores took time
    assert figures["mean_ms"]["processing_gm"] > 0 and figures["mean_ms"]["processing_lm"] > 0
    assert (tmp_path / "c.html").exists()


def test_centralized_compares_both_schedulers_at_each_size(tmp_path):
    out = tmp_path / "centralized"
    assert main(["experiment", "centralized", "--values", "200,400", "--gms", "2", "--lms",
                 "2", *TINY, "--out", str(out)]) == 0
    data = results(out)
    assert [run["name"] for run in data["runs"]] == [
        "megha-200", "centralized-200", "megha-400", "centralized-400"]
    assert data["runs"][1]["shape"] | {} == {"nodes": 200, "gms": 1, "lms": 1,
                                             "heartbeat": None, "scheduler": "centralized"}
    by_nodes = data["figures"]["by_nodes"]
    assert set(by_nodes) == {"200", "400"}
    for pair in by_nodes.values():
        assert {"p50", "p99", "p99.9"} <= set(pair["megha_ms"])
        assert pair["centralized_over_megha"]["p99"] > 0
    assert data["runs"][0]["allocation"]["cdf"]["x"]  # the CDF, for Figure 6's plot


def test_centralized_runs_saturated_and_every_job_ends(tmp_path):
    # saturated: the trace's jobs at 1.2 times what 400 slots carry, so tasks wait for slots
    # (there the scheduler's speed hardly matters: the wait for a slot dwarfs it)
    out = tmp_path / "loaded"
    assert main(["experiment", "centralized", *BUNDLED, "--values", "400", "--gms", "4",
                 "--lms", "4", "--jobs", "40", "--target-load", "1.2", "--workers", "1", "--no-log",
                 "--out", str(out)]) == 0
    data = results(out)
    for run in data["runs"]:
        assert run["counts"]["jobs_done"] == 40
        components = run["breakdown"]["components"]["mean_s"]
        assert components["waiting_for_resources"] > 1.0  # it was saturated
        assert sum(components.values()) == pytest.approx(
            sum(run["breakdown"]["mean_s"].values()))
    pair = data["figures"]["by_nodes"]["400"]
    assert pair["centralized_ms"]["p99.9"] >= pair["centralized_ms"]["p99"] > 0


def test_paper_figures_default_to_modelled_processing_others_to_none(tmp_path):
    paper_figures = {experiment.name for experiment in EXPERIMENTS
                     if isinstance(experiment, ClusterSweep)}
    assert paper_figures == {"baselines", "cluster-size", "gms-lms", "heartbeat", "components",
                             "centralized"}
    out = tmp_path / "sizes"
    assert main(["experiment", "cluster-size", "--values", "200", *TINY,
                 "--out", str(out)]) == 0
    run = results(out)["runs"][0]
    assert run["breakdown"]["components"]["mean_s"]["processing_gm"] > 0
    out = tmp_path / "none"
    assert main(["experiment", "cluster-size", *BUNDLED, "--values", "200", "--processing", "none",
                 *TINY, "--out", str(out)]) == 0
    assert results(out)["runs"][0]["breakdown"]["components"]["mean_s"]["processing_gm"] == 0


def test_bad_values_are_refused_naming_the_option(tmp_path, capsys):
    assert main(["experiment", "centralized", "--values", "many", *TINY,
                 "--out", str(tmp_path)]) != 0
    assert "--values" in capsys.readouterr().err
    assert main(["experiment", "components", "--values", "sparrow", *TINY,
                 "--out", str(tmp_path)]) != 0
    assert "--values" in capsys.readouterr().err


def test_paper_figures_default_to_the_papers_workloads(tmp_path, capsys):
    """Without a source, Figure 6 (centralized) runs on the alibaba stand-in, as the paper."""
    assert EXPERIMENTS.get("centralized").workload == "alibaba"
    assert EXPERIMENTS.get("components").workload == "cloudera"
    assert main(["experiment", "centralized", "--values", "2000", "--jobs", "20",
                 "--workers", "1", "--no-log", "--out", str(tmp_path / "c")]) == 0
    assert "alibaba stand-in" in capsys.readouterr().out


@pytest.mark.parametrize("value, named", [("megha@0", "positive number"),
                                          ("megha@fast", "positive number"),
                                          ("sparrow@0.1", "'sparrow' is not one of")])
def test_components_refuses_a_bad_value_naming_it(tmp_path, value, named, capsys):
    assert main(["experiment", "components", "--values", value, *TINY,
                 "--out", str(tmp_path / "c")]) != 0
    error = capsys.readouterr().err
    assert "--values" in error and value in error and named in error
    assert not (tmp_path / "c" / "results.json").exists()
