"""`--delays` on the Megha paper's Figures 6 (`centralized`) and 7 (`components`): every value
runs at each one-way network delay, each run named and shaped after its delay, and the
figures say per delay where communication starts to dominate (components.py's `DelaySweep`).
Tiny sizes: a few seconds each."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from megha.cli import main

TINY = ["--gms", "2", "--lms", "4", "--jobs", "20", "--workers", "1", "--no-log"]


def results(out: Path) -> dict:
    return json.loads((out / "results.json").read_text())


def test_components_runs_each_value_at_each_delay_and_communication_grows(tmp_path, capsys):
    out = tmp_path / "components"
    assert main(["experiment", "components", "--values", "megha,centralized", "--nodes", "200",
                 "--delays", "2,0.5,1,5", *TINY, "--out", str(out)]) == 0
    assert "one-way delays 0.5, 1, 2, 5 ms" in capsys.readouterr().out.splitlines()[0]
    data = results(out)
    names = [run["name"] for run in data["runs"]]
    assert names == [f"{value}@delay-{delay}ms" for delay in ("0.5", "1", "2", "5")
                     for value in ("megha", "centralized")]
    assert [run["shape"]["delay_ms"] for run in data["runs"]] == [0.5, 0.5, 1, 1, 2, 2, 5, 5]
    figures = data["figures"]
    assert figures["delays_ms"] == [0.5, 1, 2, 5]
    for delay, run in (("0.5", data["runs"][0]), ("5", data["runs"][6])):
        # each delay's own figures, under the values' names; every task's two hops take it
        megha = figures["by_delay"][delay]["components"]["megha"]
        assert megha["mean_ms"]["communication"] == pytest.approx(2 * float(delay))
        assert megha["mean_allocation_ms"] == pytest.approx(
            run["allocation"]["overall"]["mean"] * 1e3)
    for value in ("megha", "centralized"):
        summary = figures["delay_summary"][value]
        shares = [summary["by_delay"][delay]["share"]["communication"]
                  for delay in ("0.5", "1", "2", "5")]
        assert shares == sorted(shares) and shares[0] < shares[-1]
        assert summary["by_delay"]["5"]["largest"] == "communication"
        first = summary["communication_largest_from_ms"]
        assert summary["by_delay"][f"{first:g}"]["largest"] == "communication"
    assert "where communication starts to dominate" in (out / "table.txt").read_text()


def test_centralized_compares_the_pair_at_each_delay(tmp_path):
    out = tmp_path / "centralized"
    assert main(["experiment", "centralized", "--values", "200", "--delays", "0.5,2",
                 "--seeds", "2", *TINY[:-1], "--out", str(out)]) == 0
    data = results(out)
    assert [run["name"] for run in data["runs"]] == [
        f"{scheduler}-200@delay-{delay}ms/seed-{seed}" for delay in ("0.5", "2")
        for scheduler in ("megha", "centralized") for seed in (0, 1)]
    assert data["runs"][2]["shape"] == {"nodes": 200, "gms": 1, "lms": 1, "heartbeat": None,
                                        "scheduler": "centralized", "delay_ms": 0.5}
    # one event log per run, its name the run's with '/' as '-'
    assert (out / "centralized-200@delay-2ms-seed-1.log").exists()
    summary = data["figures"]["by_seed"]["0"]["delay_summary"]["200"]
    assert set(summary) == {"0.5", "2"}
    for at in summary.values():
        assert at["centralized_over_megha"]["p99"] == pytest.approx(
            at["centralized_ms"]["p99"] / at["megha_ms"]["p99"])
    # the delay is in the allocation time: two hops more of 1.5 ms at the median
    assert summary["2"]["megha_ms"]["p50"] > summary["0.5"]["megha_ms"]["p50"] + 2.5


def test_without_delays_the_figures_are_as_before(tmp_path):
    out = tmp_path / "plain"
    assert main(["experiment", "centralized", "--values", "200", *TINY,
                 "--out", str(out)]) == 0
    data = results(out)
    assert [run["name"] for run in data["runs"]] == ["megha-200", "centralized-200"]
    assert "delay_ms" not in data["runs"][0]["shape"]
    assert set(data["figures"]) == {"by_nodes"}


@pytest.mark.parametrize("given, named", [
    (["--delays", "0"], "'0' is not a delay"),
    (["--delays", "x"], "'x' is not a delay"),
    (["--delays", "1,-2"], "'-2' is not a delay"),
    (["--delays", "1,1.0"], "given twice"),
    (["--delays", "1", "--delay", "0.001"], "--delays or --delay"),
    (["--delays", "1", "--calibration", "model.json"], "--delays or --calibration"),
])
@pytest.mark.parametrize("experiment", ["components", "centralized"])
def test_bad_delays_are_refused_naming_the_option(tmp_path, capsys, experiment, given, named):
    assert main(["experiment", experiment, *given, *TINY, "--out", str(tmp_path / "c")]) != 0
    error = capsys.readouterr().err
    assert "--delays" in error and named in error
    assert not (tmp_path / "c" / "results.json").exists()
