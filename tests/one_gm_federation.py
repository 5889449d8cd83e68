"""The smallest federation file: one GM `g1`, one queue `a` with the whole share, one LM `l1`
of two nodes. A test puts in front of the queues and LMs what it is about: top-level keys
first, then its tables (`[policies]`, `[limits]`, ...)."""

from __future__ import annotations

QUEUE_AND_LM = """\
[[queues]]
name = "a"
share = 1.0
gm = "g1"

[[lms]]
id = "l1"
nodes = { count = 2, cpu_m = 1000, mem_mib = 1024 }
"""


def one_gm_file(head: str = "") -> str:
    """The file, with `head` (keys and tables, TOML) after `gms`."""
    return f'gms = ["g1"]\n{head}\n\n{QUEUE_AND_LM}'
