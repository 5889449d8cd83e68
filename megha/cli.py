"""`megha <command>`: every tool of the project behind one entry point.

Each command is a module with `add_arguments(parser)` and `run(args) -> exit status`; the table
below is the whole list, so a new tool is one line here. Bad input (`InvalidInput`) ends the
command with its message and exit status 2, never a traceback.
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
    "synth": ("loadgen.synth_command",
              "build a workload (trace, Alibaba or Poisson; constraints, resources, users) "
              "and save it as a job file"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="megha", description="Tools of the Megha-style federated scheduler.")
    commands = parser.add_subparsers(dest="command", metavar="command", required=True)
    for name, (module, summary) in COMMANDS.items():
        sub = commands.add_parser(name, help=summary, description=summary)
        sub.set_defaults(module=module)
        importlib.import_module(module).add_arguments(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return importlib.import_module(args.module).run(args)
    except InvalidInput as error:
        print(f"megha {args.command}: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"megha {args.command}: interrupted", file=sys.stderr)
        return 130
