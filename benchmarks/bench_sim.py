"""The simulator's speed, unsaturated and saturated, and how its cost per task grows with the
backlog.

    .venv/bin/python benchmarks/bench_sim.py            # every case below, about a minute
    .venv/bin/python benchmarks/bench_sim.py --only unsaturated --nodes 50000 --gms 10 --lms 50

Each case runs `megha simulate` in slot mode on the project's YH1_sub trace as a child process
(so its peak memory is its own), with the event log written and the end-of-run invariant
checks on, as a user runs it. The cases:

- `unsaturated`: the whole trace at the load it was recorded at (122,878 tasks);
- `saturated`: its first 600 jobs (29,570 tasks) at `--target-load 1.2`: tasks wait, queues
  preempt each other, and the GMs' backlogs grow to thousands of tasks;
- `saturated_long`: the whole trace at `--target-load 1.2`: saturation held for seven hours of
  virtual time, as in a long saturated trace. Its cost per task is about twice the 600-job
  case's because the scheduling itself does more per task: stale views refuse 1.16 launches
  per task (0.41 in the 600-job case) and preemptions 0.39 per task (0.14), each one more
  placement, answer and requeue (the results' `counts`);
- `saturated_queued`: the saturated case with local queues two deep (`--queue-depth 2`):
  tasks also wait at the workers, in SRPT order, and snapshots list the queued attempts;
- `growth_small`, `growth_large`: the saturated case at 300 and 1,200 jobs (`--growth`), to
  see whether the cost per task grows with the backlog;
- `varied`, `copies`: the first 600 jobs at `--target-load 0.6`, where nodes sit idle, with
  nodes' speeds varying (`--variability two-state`), without and with redundant copies on
  the idle nodes (`--redundancy srpt+r`): what copies, checkpoints and restores cost.

Figures, one `name=value` line each:

    sim_wall_s.CASE=...               the run and its checks, the child's own figure
    sim_tasks_per_s.CASE=...          tasks simulated per second of that wall
    sim_events_per_s.CASE=...         engine steps (deliveries, ticks, task ends) per second
    sim_steps_per_task.CASE=...       engine steps per task: an instant's deliveries are one
                                      step (simulator/engine.py); issue 38's target <= 4
    sim_peak_rss_mb.CASE=...
    sim_tasks_per_s_unsaturated=...   the issue's two headline figures
    sim_tasks_per_s_saturated=...
    sim_saturated_over_unsaturated=...  target >= 0.5
    sim_cost_growth=...               wall per task at 1,200 jobs / at 300; target <= 1.5
    sim_queued_over_saturated=...     tasks/s with local queues / without, saturated
    sim_copies_over_varied=...        tasks/s with redundant copies / without, load 0.6
    sim_megha_over_sparrow.CASE=...   for `unsaturated`, `saturated` and `saturated_long`: the
                                      wall of the run over that of the same case under our
                                      own Sparrow baseline (`--scheduler sparrow`, same trace,
                                      nodes and log setting); issue 38's targets <= 3 and <= 5
                                      for the first two (`--no-baseline` skips these runs)
    sim_megha_over_sparrow_range.CASE=LO-HI  with `--repeat N` (N > 1): the lowest and highest
                                      ratio of the N pairs

With `--repeat N` each case runs N times, alternating with its Sparrow run where it has one,
and the walls are the medians (peak memory the largest): one Sparrow run of the saturated
case takes 0.6 to 0.8 s on this machine, so a single pair's ratio moves by a quarter with
the machine's noise alone.

Targets on a 2-core machine: the whole trace at 10,000 nodes <= 10 s, at 50,000 nodes, 10 GMs
and 50 LMs <= 25 s; the saturated 600-job case <= 5 s.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from loadgen.paper_workloads import YH1_SUB  # noqa: E402

SATURATED = ["--target-load", "1.2"]
CASES = ("growth_small", "varied", "copies", "saturated", "saturated_queued", "growth_large",
         "unsaturated", "saturated_long")  # the order they run in, smallest first
VARIED = ["--target-load", "0.6", "--variability", "two-state"]


def case_arguments(name: str, args: argparse.Namespace) -> list[str]:
    small, large = args.growth
    jobs = {"saturated": args.saturated_jobs, "saturated_queued": args.saturated_jobs,
            "growth_small": small, "growth_large": large}
    if name == "unsaturated":
        return []
    if name == "saturated_long":
        return SATURATED
    if name in ("varied", "copies"):
        copies = ["--redundancy", "srpt+r"] if name == "copies" else []
        return ["--jobs", str(args.saturated_jobs), *VARIED, *copies]
    queues = ["--queue-depth", "2"] if name == "saturated_queued" else []
    return ["--jobs", str(jobs[name]), *SATURATED, *queues]


BASELINE = "sparrow"  # the figure the issue compares against: our own Sparrow model
BASELINE_CASES = ("unsaturated", "saturated", "saturated_long")


def run_case(name: str, extra: list[str], args: argparse.Namespace, folder: Path,
             scheduler: str | None = None) -> dict:
    """One `megha simulate` child (under `scheduler`, by default `--scheduler`'s); its
    figures."""
    scheduler = scheduler or args.scheduler
    log = ["--no-log"] if args.no_log else ["--log", str(folder / f"{name}-{scheduler}.log")]
    results = folder / f"{name}-{scheduler}.json"
    out, err = folder / f"{name}-{scheduler}.out", folder / f"{name}-{scheduler}.err"
    with out.open("w") as stdout, err.open("w") as stderr:
        child = subprocess.Popen(
            [sys.executable, "-m", "megha", "simulate", "--scheduler", scheduler,
             "--nodes", str(args.nodes), "--gms", str(args.gms), "--lms", str(args.lms),
             "--slots", "--trace", str(args.trace), "--results", str(results), *extra, *log],
            cwd=ROOT, stdout=stdout, stderr=stderr, text=True)
        # the child's own usage, reaped here: RUSAGE_CHILDREN's ru_maxrss is the largest of
        # any child so far, so every case after a bigger one would show the bigger one's peak
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        sys.exit(f"case {name} ({scheduler}) failed:\n{err.read_text()[-2000:]}")
    peak_kib = usage.ru_maxrss
    header = re.search(r"(\d+) jobs, (\d+) tasks", out.read_text())
    figures = json.loads(results.read_text())  # the wall unrounded: a toy run's is ~0.01 s
    wall, steps = figures["wall_s"], figures["steps"]
    return {"tasks": int(header.group(2)), "wall": wall, "steps": steps,
            "rss_mb": peak_kib / 1024}


def summary(runs: list[dict]) -> dict:
    """One case's figures over its repeats: the median wall, the largest peak (the steps
    and tasks of a seeded run are the same every time)."""
    return {"tasks": runs[0]["tasks"], "steps": runs[0]["steps"],
            "wall": statistics.median(run["wall"] for run in runs),
            "rss_mb": max(run["rss_mb"] for run in runs)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=YH1_SUB)
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--gms", type=int, default=4)
    parser.add_argument("--lms", type=int, default=25)
    parser.add_argument("--scheduler", default="megha")
    parser.add_argument("--only", choices=CASES, action="append",
                        help="run only this case (repeatable)")
    parser.add_argument("--saturated-jobs", type=int, default=600,
                        help="jobs of the saturated case (default 600)")
    parser.add_argument("--growth", type=lambda text: tuple(int(n) for n in text.split(",")),
                        default=(300, 1200), metavar="SMALL,LARGE",
                        help="jobs of the two growth cases (default 300,1200)")
    parser.add_argument("--no-log", action="store_true", help="measure without the event log")
    parser.add_argument("--no-baseline", action="store_true",
                        help=f"skip the {BASELINE} runs of sim_{{scheduler}}_over_{BASELINE}")
    parser.add_argument("--repeat", type=int, default=1, metavar="N",
                        help="run each case N times, alternating with its baseline run; "
                             "report medians (default 1)")
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error(f"--repeat must be at least 1, got {args.repeat}")
    names = [name for name in CASES if not args.only or name in args.only]
    figures = {}
    with tempfile.TemporaryDirectory() as folder:
        for name in names:
            print(f"# {name} ...", file=sys.stderr, flush=True)
            with_baseline = (name in BASELINE_CASES and not args.no_baseline
                             and args.scheduler != BASELINE)
            runs, baselines = [], []
            for _ in range(args.repeat):  # pairs, so that both see the same stretch of noise
                runs.append(run_case(name, case_arguments(name, args), args, Path(folder)))
                if with_baseline:
                    baselines.append(run_case(name, case_arguments(name, args), args,
                                              Path(folder), BASELINE))
            figures[name] = case = summary(runs)
            print(f"sim_wall_s.{name}={case['wall']:.2f}")
            print(f"sim_tasks_per_s.{name}={case['tasks'] / case['wall']:.0f}")
            print(f"sim_events_per_s.{name}={case['steps'] / case['wall']:.0f}")
            print(f"sim_steps_per_task.{name}={case['steps'] / case['tasks']:.2f}")
            print(f"sim_peak_rss_mb.{name}={case['rss_mb']:.0f}", flush=True)
            if with_baseline:
                baseline = summary(baselines)
                print(f"sim_wall_s.{name}.{BASELINE}={baseline['wall']:.2f}")
                print(f"sim_{args.scheduler}_over_{BASELINE}.{name}="
                      f"{case['wall'] / baseline['wall']:.2f}", flush=True)
                if args.repeat > 1:
                    ratios = [run["wall"] / base["wall"]
                              for run, base in zip(runs, baselines, strict=True)]
                    print(f"sim_{args.scheduler}_over_{BASELINE}_range.{name}="
                          f"{min(ratios):.2f}-{max(ratios):.2f}", flush=True)
    rate = {name: case["tasks"] / case["wall"] for name, case in figures.items()}
    if "unsaturated" in rate:
        print(f"sim_tasks_per_s_unsaturated={rate['unsaturated']:.0f}")
    if "saturated" in rate:
        print(f"sim_tasks_per_s_saturated={rate['saturated']:.0f}")
    if "unsaturated" in rate and "saturated" in rate:
        print(f"sim_saturated_over_unsaturated={rate['saturated'] / rate['unsaturated']:.2f}")
    if "saturated" in rate and "saturated_queued" in rate:
        print(f"sim_queued_over_saturated={rate['saturated_queued'] / rate['saturated']:.2f}")
    if "varied" in rate and "copies" in rate:
        print(f"sim_copies_over_varied={rate['copies'] / rate['varied']:.2f}")
    if "growth_small" in rate and "growth_large" in rate:
        print(f"sim_cost_growth={rate['growth_small'] / rate['growth_large']:.2f}")


if __name__ == "__main__":
    main()
