"""`megha experiment`: every study is a registered experiment with a sub-command of its own,
whose --help lists its options and the common ones only; an unknown experiment and another
experiment's option are refused; bad input is refused by its option before anything runs."""

from __future__ import annotations

import re

import pytest

from common.errors import InvalidInput
from megha.cli import build_parser, main
from simulator.experiments.registry import EXPERIMENTS

NAMES = ("baselines", "centralized", "cluster-size", "components", "fairness", "gms-lms",
         "heartbeat", "packing", "packing-cluster", "redundancy", "redundancy-cluster",
         "slearn")
COMMON = {"--out", "--html", "--workers", "--dask", "--no-log"}
SWEEPS = {"baselines", "centralized", "cluster-size", "components", "gms-lms", "heartbeat"}
SIMULATED = SWEEPS | {"slearn", "redundancy-cluster", "packing-cluster", "fairness"}
# options that belong to some experiments only: exactly those list them
OWNERS = {
    "--offline-jobs": {"packing"},
    "--modes": {"packing"},
    "--settings": {"packing"},
    "--resolve-growth": {"packing"},
    "--remote-factor": {"packing"},
    "--rates": {"redundancy"},
    "--horizon": {"redundancy"},
    "--machines": {"redundancy", "packing"},
    "--speed": {"redundancy", "redundancy-cluster"},
    "--beta": {"redundancy", "redundancy-cluster"},
    "--max-copies": {"redundancy-cluster"},
    "--logs": {"redundancy-cluster"},
    "--loads": {"redundancy-cluster", "packing", "packing-cluster"},
    "--weights": {"packing", "packing-cluster"},
    "--sizes": {"fairness"},
    "--config": set(),  # every experiment generates its clusters
    "--fairness": SIMULATED - {"fairness"},  # which the fairness study sweeps itself
    "--probe-ratio": SWEEPS,
    "--slots": SWEEPS,
    "--scheduler": {"cluster-size", "gms-lms", "heartbeat", "slearn"},
    "--placement": SWEEPS,
    "--calibration": SIMULATED,
    "--no-check": SIMULATED,
    "--poisson": SWEEPS | {"slearn", "redundancy-cluster"},
}


def options_of(name: str, capsys) -> set[str]:
    with pytest.raises(SystemExit) as done:
        main(["experiment", name, "--help"])
    assert done.value.code == 0
    return set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", capsys.readouterr().out))


def test_every_study_is_registered_and_listed_with_its_summary(capsys) -> None:
    assert EXPERIMENTS.names() == NAMES
    for experiment in EXPERIMENTS:  # the Protocol's members
        assert isinstance(experiment.name, str) and isinstance(experiment.summary, str)
        for method in ("add_options", "options", "describe", "runs", "run_line", "figures"):
            assert callable(getattr(experiment, method)), (experiment.name, method)
    with pytest.raises(SystemExit):
        main(["experiment", "--help"])
    listing = " ".join(capsys.readouterr().out.split())
    for experiment in EXPERIMENTS:
        assert experiment.name in listing
        assert " ".join(experiment.summary.split()[:6]) in listing


@pytest.mark.parametrize("name", NAMES)
def test_an_experiments_help_lists_its_options_and_the_common_ones_only(name, capsys) -> None:
    options = options_of(name, capsys)
    assert options >= COMMON and "--values" in options
    for option, owners in OWNERS.items():
        assert (option in options) == (name in owners), (option, name)


def test_an_unknown_experiment_is_a_clear_error(capsys) -> None:
    with pytest.raises(SystemExit) as done:
        main(["experiment", "packing-federated"])
    assert done.value.code == 2
    error = capsys.readouterr().err
    assert "invalid choice: 'packing-federated'" in error and "packing-cluster" in error
    with pytest.raises(InvalidInput, match="unknown experiment 'nope'.*redundancy-cluster"):
        EXPERIMENTS.get("nope")


@pytest.mark.parametrize(("argv", "option"), [
    (["redundancy", "--offline-jobs", "6"], "--offline-jobs"),
    (["redundancy", "--preset", "federated"], "--preset"),
    (["packing", "--sizes", "10"], "--sizes"),
    (["heartbeat", "--config", "federation.toml"], "--config"),
    (["fairness", "--trace", "x.tr"], "--trace"),
    (["baselines", "--scheduler", "sparrow"], "--scheduler"),
])
def test_an_option_of_another_experiment_is_refused(argv, option, capsys) -> None:
    with pytest.raises(SystemExit) as done:
        main(["experiment", *argv])
    assert done.value.code == 2
    assert f"unrecognized arguments: {option}" in capsys.readouterr().err


def parsed(*argv: str):
    return build_parser("experiment").parse_args(["experiment", *argv])


@pytest.mark.parametrize(("argv", "option"), [
    (["packing", "--machines", "0"], "--machines"),
    (["packing", "--weights", "equal,heavy"], "--weights"),
    (["packing-cluster", "--weights", "priority"], "--weights"),
    (["redundancy", "--rates", "1,fast"], "--rates"),
    (["fairness", "--sizes", "2"], "--sizes"),
    (["slearn", "--values", "slearn,sjf"], "--values"),
    (["cluster-size", "--values", "many"], "--values"),
    (["baselines", "--queue-depth", "-1"], "--queue-depth"),
    (["components", "--delay", "0.001", "--calibration", "model.json"], "--delay"),
    (["redundancy-cluster", "--target-load", "1"], "--target-load"),
])
def test_the_typed_options_refuse_bad_input_by_its_option(argv, option) -> None:
    args = parsed(*argv)
    with pytest.raises(InvalidInput) as refused:
        EXPERIMENTS.get(args.experiment).options(args)
    assert refused.value.field == option


def test_the_options_are_frozen_and_the_first_line_names_the_experiment(tmp_path,
                                                                         capsys) -> None:
    args = parsed("redundancy", "--machines", "4", "--rates", "0.5", "--horizon", "50",
                  "--seeds", "1", "--values", "srpt,srpt+r")
    options = EXPERIMENTS.get("redundancy").options(args)
    with pytest.raises(AttributeError):
        options.machines = 5  # frozen
    assert main(["experiment", "redundancy", "--machines", "4", "--rates", "0.5", "--horizon",
                 "50", "--seeds", "1", "--values", "srpt,srpt+r", "--workers", "1",
                 "--out", str(tmp_path)]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("redundancy: 4 machines") and "policies srpt, srpt+r" in first
