"""`megha experiment centralized`: decentralized megha against a centralized scheduler (one
GM and one LM over the whole cluster, the same core), the Megha paper's Figure 6, where
the centralized scheduler is far slower at 10,000 and 20,000 nodes because one GM and one LM
do all the work.

A sweep of a simulated cluster (cluster_sweep.py). `--values` lists node counts (default
10000,20000); at each, megha (4 GMs, 25 LMs unless `--gms`, `--lms`) and centralized run the
alibaba stand-in, as the paper, with modelled processing
(simulator/processing.py): without processing time both would place every task two network
delays after its arrival. The figures: each pair's allocation-time percentiles (p50, p90,
p99, p99.9, max, mean), centralized over megha, and each run's CDF (the runs'
`allocation.cdf`, plotted by `--html`). With `--delays MS,...` (components.py's `DelaySweep`)
every pair runs at each one-way delay, and `delay_summary` gives, per node count, both
schedulers' allocation p50 and p99 and centralized over megha at each delay.
"""

from __future__ import annotations

from rich.table import Table

from common.errors import InvalidInput
from simulator.experiments.delay_sweep import DelaySweep, by_delay
from simulator.experiments.registry import EXPERIMENTS

PERCENTILES = ("p50", "p90", "p99", "p99.9", "max", "mean")


def runs(values: tuple[str, ...]) -> list[tuple[str, dict]]:
    """megha and centralized at each node count."""
    out = []
    for value in values:
        try:
            nodes = int(value)
        except ValueError:
            raise InvalidInput("--values", f"{value!r} is not a node count") from None
        if nodes < 1:
            raise InvalidInput("--values", f"{value!r} is not a node count")
        out += [(f"megha-{nodes}", {"scheduler": "megha", "nodes": nodes}),
                (f"centralized-{nodes}", {"scheduler": "centralized", "nodes": nodes})]
    return out


def figures(reports: list[dict]) -> tuple[dict, tuple[Table, ...]]:
    """Per node count: both schedulers' allocation percentiles (ms) and their ratios:
    results.json's `figures`, and their table."""
    by_name = {report["name"]: report for report in reports}
    pairs = {}
    for report in reports:
        nodes = report["shape"]["nodes"]
        if report["shape"]["scheduler"] != "megha" or f"centralized-{nodes}" not in by_name:
            continue
        megha = _percentiles(report)
        central = _percentiles(by_name[f"centralized-{nodes}"])
        pairs[str(nodes)] = {"megha_ms": megha, "centralized_ms": central,
                             "centralized_over_megha": {
                                 key: central[key] / megha[key] if megha.get(key) else None
                                 for key in megha}}
    table = Table(title="allocation time (ms): megha vs centralized (one GM, one LM)")
    for column in ("nodes", "scheduler", *PERCENTILES):
        table.add_column(column, justify="right")
    for nodes, pair in pairs.items():
        for label, key in (("megha", "megha_ms"), ("centralized", "centralized_ms")):
            table.add_row(nodes, label, *(f"{pair[key].get(p, 0):.2f}" for p in PERCENTILES))
        table.add_row(nodes, "ratio", *(_ratio(pair["centralized_over_megha"].get(p))
                                        for p in PERCENTILES))
    return {"by_nodes": pairs}, (table,)


def _percentiles(report: dict) -> dict:
    overall = report["allocation"]["overall"]
    return {key: overall[key] * 1e3 for key in PERCENTILES if key in overall}


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def delay_summary(by_delay: dict[str, dict]) -> tuple[dict, Table]:
    """Per node count, at each delay: both schedulers' allocation p50 and p99 (ms) and
    centralized over megha: results.json's `figures.delay_summary`, and its table."""
    summary: dict = {}
    table = Table(title="allocation time (ms) at each one-way delay: centralized over megha")
    for column in ("nodes", "delay (ms)", "megha p50", "megha p99", "centralized p50",
                   "centralized p99", "ratio p50", "ratio p99"):
        table.add_column(column, justify="right")
    for delay, figures_at in by_delay.items():
        for nodes, pair in figures_at["by_nodes"].items():
            at = {key: {p: pair[key].get(p) for p in ("p50", "p99")}
                  for key in ("megha_ms", "centralized_ms", "centralized_over_megha")}
            summary.setdefault(nodes, {})[delay] = at
            table.add_row(nodes, delay, *(_ms(at[key][p]) for key in ("megha_ms", "centralized_ms")
                                          for p in ("p50", "p99")),
                          *(_ratio(at["centralized_over_megha"][p]) for p in ("p50", "p99")))
    return summary, table


EXPERIMENTS.register(DelaySweep(
    name="centralized",
    summary="megha against one GM and one LM over the whole cluster: allocation time "
            "percentiles and CDF (the Megha paper's Figure 6)",
    swept="node counts", default_values="10000,20000", plan=runs,
    defaults={"gms": 4, "lms": 25}, sets=frozenset({"scheduler", "nodes"}), workload="alibaba",
    figures_of=by_delay(figures, delay_summary)))
