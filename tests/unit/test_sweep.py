"""simulator/sweep.py: an experiment's runs give the same results in this process, in a pool of
processes and on a Dask cluster, in the order they were listed; an error names its run."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from common.errors import InvalidInput
from megha.cli import main
from simulator.sweep import Run, run_sweep

# a tiny real experiment: two cluster sizes, 10 jobs of YH1_sub
TINY = ["experiment", "cluster-size", "--values", "200,400", "--jobs", "10"]
WALL_TIMES = {"wall_s"}  # the only figures that differ between two runs of the same point


def _square_after(x: int, pause: float) -> int:
    time.sleep(pause)
    return x * x


def _refuse(x: int) -> int:
    if x == 2:
        raise ValueError("two is not welcome")
    return x


def _refuse_as_bad_input(x: int) -> int:
    raise InvalidInput("--x", f"{x} is bad")


def _runs_without_wall_times(out: Path) -> list[dict]:
    runs = json.loads((out / "results.json").read_text())["runs"]
    return [{key: value for key, value in run.items() if key not in WALL_TIMES} for run in runs]


@pytest.fixture(scope="module")
def in_process(tmp_path_factory) -> Path:
    """The tiny experiment run one run after the other in this process: the reference."""
    out = tmp_path_factory.mktemp("in-process")
    assert main([*TINY, "--workers", "1", "--out", str(out)]) == 0
    return out


def test_results_come_back_in_the_runs_order_whatever_order_they_end_in() -> None:
    ended = []
    runs = [Run(f"run-{x}", _square_after, (x, 0.3 if x == 0 else 0.0)) for x in range(4)]
    results = run_sweep(runs, workers=2, on_done=lambda finished: ended.append(finished.name))
    assert results == [0, 1, 4, 9]
    assert ended[-1] == "run-0" and sorted(ended) == [run.name for run in runs]
    assert run_sweep(runs, workers=1) == results


def test_a_pool_of_processes_gives_the_in_process_results(in_process, tmp_path) -> None:
    assert main([*TINY, "--workers", "2", "--out", str(tmp_path)]) == 0
    assert _runs_without_wall_times(tmp_path) == _runs_without_wall_times(in_process)
    assert [run["name"] for run in _runs_without_wall_times(tmp_path)] == ["200-nodes",
                                                                           "400-nodes"]
    for name in ("200-nodes", "400-nodes"):
        assert (tmp_path / f"{name}.log").read_bytes() == (in_process / f"{name}.log").read_bytes()


@pytest.mark.parametrize("workers", [1, 2])
def test_an_error_in_a_run_names_the_run(workers) -> None:
    runs = [Run(f"point-{x}", _refuse, (x,)) for x in range(4)]
    with pytest.raises(ValueError, match="two is not welcome") as caught:
        run_sweep(runs, workers=workers)
    assert "in the run point-2" in caught.value.__notes__


def test_runs_of_the_same_name_are_refused() -> None:
    with pytest.raises(InvalidInput, match="two runs are named 'a'"):
        run_sweep([Run("a", _refuse, (1,)), Run("a", _refuse, (3,))], workers=1)


def test_bad_input_in_a_pool_process_comes_back_as_bad_input() -> None:
    """InvalidInput's constructor is not pickle's: the sweep teaches it to cross, so `megha`
    still ends with the message, not a broken pool."""
    with pytest.raises(InvalidInput) as caught:
        run_sweep([Run("a", _refuse_as_bad_input, (1,)), Run("b", _refuse_as_bad_input, (2,))],
                  workers=2)
    assert caught.value.field == "--x" and caught.value.message.endswith("is bad")


def test_a_dask_cluster_gives_the_in_process_results_and_the_logs(in_process, tmp_path) -> None:
    from dask.distributed import LocalCluster

    with LocalCluster(n_workers=2, processes=True, threads_per_worker=1,
                      dashboard_address=None) as cluster:
        assert main([*TINY, "--dask", cluster.scheduler_address, "--out", str(tmp_path)]) == 0
    assert _runs_without_wall_times(tmp_path) == _runs_without_wall_times(in_process)
    for name in ("200-nodes", "400-nodes"):  # written by the workers, gathered here
        assert (tmp_path / f"{name}.log").read_bytes() == (in_process / f"{name}.log").read_bytes()


def test_dask_not_installed_is_a_clear_error(monkeypatch, capsys) -> None:
    monkeypatch.setitem(sys.modules, "dask.distributed", None)  # its import now fails
    assert main([*TINY, "--dask", "tcp://127.0.0.1:8786"]) == 2
    error = capsys.readouterr().err
    assert "--dask: Dask is not installed here" in error and "pip install -e '.[sweep]'" in error


@pytest.mark.parametrize(("options", "message"), [
    (["--workers", "0"], "--workers: must be at least 1, got 0"),
    (["--workers", "2", "--dask", "tcp://127.0.0.1:8786"], "--workers: with --dask"),
])
def test_bad_sweep_options_are_refused_naming_the_option(options, message, capsys) -> None:
    assert main([*TINY, *options]) == 2
    assert message in capsys.readouterr().err
