"""A job submission's body, bounded before it is built: its byte cap and its task count.

Why: pydantic builds every task of a body before any limit on their number can be checked, so
a body of 300,000 tiny tasks cost a GM 1.6 s and 100 MiB before it was refused for having more
than `limits.max_tasks_per_job`. Two bounds now come first:

- **a byte cap for `POST /v1/jobs`**, derived from the limits: an envelope plus a budget per
  task (`TASK_BYTES`) times `max_tasks_per_job`. A task with the longest ids, a few dozen
  constraints and a duration takes about 400 bytes; tasks with large placement sets share the
  job's budget (services/bodylimit.py answers 413 with the cap and its source);
- **the task count**, read by a streaming JSON parser (ijson's C backend) that stops at the
  first task over the limit, so refusing a body costs what scanning an allowed job costs.

Only then does pydantic build the job (services/http.py, `parse_body`).
"""

from __future__ import annotations

import ijson

from common.errors import InvalidInput
from common.wire import ID_MAX

JOB_ENVELOPE_BYTES = 64 * 1024  # the job's own fields, and JSON's whitespace
TASK_BYTES = 1024  # each task's budget in a submission
# Entries of all of a job's placement sets, and of all its constraint lists. Each entry is a
# Python object once pydantic builds the job (about 100-200 bytes), so without these a body
# under the cap could hold a million of them and cost a GM 200 MiB to build, or to refuse
# (measured with benchmarks/bench_admission.py). At 50,000 of each, a job at every bound
# costs the scan and pydantic about 25 ms each; at 100,000 it was 37 and 52 ms. The widest job
# of the bundled traces (3,035 tasks) with every one of 21 constraints on each task would
# need 64,000: real jobs carry a few per task.
MAX_PLACEMENT_ENTRIES_PER_JOB = 50_000
MAX_CONSTRAINT_ENTRIES_PER_JOB = 50_000
# Bytes the scan hands its parser at a time. The parser builds the objects of a whole chunk
# before the scan sees the first, so a chunk bounds what a refused body costs; a small one
# makes a long string slow (measured: a 10 MB id took 260 ms in 64 KiB chunks, 30 ms in 1 MiB).
SCAN_CHUNK = 1 << 20


def submission_body_cap(max_tasks_per_job: int) -> int:
    """The largest `POST /v1/jobs` body a GM reads, from `limits.max_tasks_per_job`."""
    return JOB_ENVELOPE_BYTES + TASK_BYTES * max_tasks_per_job


def check_shape(body: bytes, max_tasks: int) -> InvalidInput | None:
    """What makes the body's job too big to build, found by scanning it task by task (each
    built in C and dropped at once, and the scan stopping at the first bound passed): more
    than `max_tasks` tasks, or too many placement-set or constraint entries. None if none is;
    a body that is not a JSON object with a `tasks` array passes, for pydantic to say what is
    wrong with it (it is small: under the cap, and not holding many tasks)."""
    tasks = nodes = constraints = 0
    try:
        for task in ijson.items(body, "tasks.item", use_float=True, buf_size=SCAN_CHUNK):
            tasks += 1
            if tasks > max_tasks:
                return InvalidInput("tasks", f"more than {max_tasks} tasks: a job may have "
                                             f"at most {max_tasks} (limits.max_tasks_per_job)")
            if isinstance(task, dict):
                nodes += _length(task.get("nodes"))
                constraints += _length(task.get("constraints"))
                if _length(task.get("task_id")) > ID_MAX:  # refused here, not quoted later
                    return InvalidInput(f"tasks.{tasks - 1}.task_id",
                                        f"is longer than {ID_MAX} characters")
            if nodes > MAX_PLACEMENT_ENTRIES_PER_JOB:
                return InvalidInput(f"tasks.{tasks - 1}.nodes", (
                    f"the job's placement sets hold more than {MAX_PLACEMENT_ENTRIES_PER_JOB} "
                    f"node ids in all"))
            if constraints > MAX_CONSTRAINT_ENTRIES_PER_JOB:
                return InvalidInput(f"tasks.{tasks - 1}.constraints", (
                    f"the job's constraint lists hold more than "
                    f"{MAX_CONSTRAINT_ENTRIES_PER_JOB} ids in all"))
    except (ijson.JSONError, UnicodeDecodeError, ValueError):
        return None
    return None


def _length(value: object) -> int:
    return len(value) if isinstance(value, list | str) else 0
