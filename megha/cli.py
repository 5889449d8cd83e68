"""`megha <command>`: every tool of the project behind one entry point.

Each command is a module with `add_arguments(parser)` and `run(args) -> exit status`; the table
below is the whole list, so a new tool is one line here. Only the chosen command's module is
imported: `megha replay` in the service image needs neither numpy nor matplotlib. Bad input
(`InvalidInput`) ends the command with its message and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from common.errors import InvalidInput

# name -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "replay": ("loadgen.command",
               "replay a workload against the GMs over HTTP and print a summary"),
    "inspect": ("inspection.command",
                "turn event logs into answers: allocation-time breakdown, JCT, counts, "
                "fairness, comparisons, plots, an HTML report"),
    "simulate": ("simulator.command",
                 "run a workload on a simulated cluster (10k to 50k nodes) under the federated "
                 "core, a centralized one, Sparrow or random placement"),
    "experiment": ("simulator.experiments",
                   "the papers' simulation studies, one sub-command each (Megha's figures, "
                   "fairness, SLearn's predictors, redundancy, packing): `megha experiment "
                   "--help` lists them"),
    "twin": ("twin.command",
             "run one workload on the real services and in the simulator, fit the "
             "simulator's model of time from the services' logs, and say how far apart they "
             "are"),
    "dead-letters": ("api.dead_letters_command",
                     "list the messages no service could take, and resubmit them"),
    "synth": ("loadgen.synth_command",
              "build a workload (trace, Alibaba or Poisson; constraints, resources, users) "
              "and save it as a job file"),
}


def build_parser(chosen: str | None = None) -> argparse.ArgumentParser:
    """The parser; the options of `chosen` only (all commands' when it is None)."""
    parser = argparse.ArgumentParser(
        prog="megha", description="Tools of the Megha-style federated scheduler.")
    commands = parser.add_subparsers(dest="command", metavar="command", required=True)
    for name, (module, summary) in COMMANDS.items():
        sub = commands.add_parser(name, help=summary, description=summary)
        sub.set_defaults(module=module)
        if chosen is None or name == chosen:
            importlib.import_module(module).add_arguments(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    chosen = next((word for word in argv if not word.startswith("-")), "")
    args = build_parser(chosen).parse_args(argv)
    try:
        return importlib.import_module(args.module).run(args)
    except InvalidInput as error:
        print(f"megha {args.command}: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"megha {args.command}: interrupted", file=sys.stderr)
        return 130
