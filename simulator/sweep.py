"""Running an experiment's independent runs somewhere, and gathering their results back.

`run_sweep(runs, workers=..., dask=...)` runs every `Run` (a function and its arguments) and
returns their results in the order of `runs`, whatever order they ended in:

- `workers=1` (or a single run): in this process, one after the other; the runs print their
  own lines and progress bars as a lone `megha simulate` does, and a traceback is plain;
- otherwise: a pool of `workers` processes on this machine (default: one per core, at most
  one per run);
- `dask="tcp://host:8786"`: the Dask distributed cluster whose scheduler is at that address
  (the 'sweep' extra). Start its workers with one thread each (`dask worker ADDRESS
  --nthreads 1 --nworkers N`): the runs are pure Python, so threads of one process would not
  run them side by side, and they switch the garbage collector off for their length.

Event logs. A run that writes an event log names its place in the parent's `--out` in
`Run.log`, and its function takes that place as the keyword `log`. On this machine (in
process or in the pool) the run writes there directly. On Dask the workers may be other
machines that do not see the parent's folders: the run writes its log into a temporary
folder of its worker, the worker sends the log's bytes back with the result, and the parent
writes them to `Run.log`. A log then travels through the Dask scheduler's network in memory:
for runs of hundreds of MB each, prefer the pool or no logs. What the runs read (a `--trace`
file, the bundled trace) must be at the same path on every worker.

Printing. In the pool and on Dask, where the runs' lines would interleave (or be printed on
another machine), each run's output is thrown away and the parent prints one line per run as
it ends (`on_done`; `progress_printer` makes the usual one).

Results and arguments travel by pickle, so they must be picklable, and a run must depend on
its arguments alone (its seeds among them), never on the process that runs it. The first run
that raises ends the sweep: the runs not started yet are cancelled (those running end first,
in the pool), and its error is raised again with a note naming the run.
"""

from __future__ import annotations

import contextlib
import copyreg
import os
import pickle
import tempfile
import time
import traceback
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common.errors import InvalidInput

DASK_CONNECT_TIMEOUT = "10s"  # a wrong address is an error after this, not a long hang
INSTALL_DASK = "install the 'sweep' extra: pip install -e '.[sweep]'"


@dataclass(frozen=True)
class Run:
    """One independent run: `function(*args)`, and with `log` set, `function(*args, log=...)`
    where the run writes its event log (which ends up at `log`)."""

    name: str  # unique in a sweep: the progress lines and errors name the run by it
    function: Callable[..., Any]  # a module's top-level function: it is pickled by name
    args: tuple = ()
    log: Path | None = None


@dataclass(frozen=True)
class Finished:
    """What `on_done` is told as each run ends."""

    name: str
    result: Any
    wall_s: float  # the run's own time, where it ran
    done: int  # runs ended so far, this one included
    total: int


OnDone = Callable[[Finished], None]


def check(workers: int | None, dask: str | None) -> None:
    """Refuse `--workers` and `--dask` values no sweep can use, before any run starts."""
    if workers is not None and workers < 1:
        raise InvalidInput("--workers", f"must be at least 1, got {workers}")
    if dask is not None:
        if workers is not None:
            raise InvalidInput("--workers", "with --dask the Dask cluster's workers decide how "
                                            "many runs go at once")
        _dask()


def run_sweep(runs: list[Run], *, workers: int | None = None, dask: str | None = None,
              on_done: OnDone | None = None) -> list[Any]:
    """Every run's result, in the order of `runs`; `on_done` is told of each as it ends."""
    check(workers, dask)
    names = [run.name for run in runs]
    for name, count in Counter(names).items():
        if count > 1:  # its log and its results would overwrite another's
            raise InvalidInput("runs", f"two runs are named {name!r}: was a value given twice?")
    on_done = on_done or (lambda finished: None)
    if dask is not None:
        results = _on_dask(runs, dask, on_done)
    else:
        size = max(1, min(workers or os.cpu_count() or 1, len(runs)))
        results = _in_process(runs, on_done) if size == 1 else _in_pool(runs, size, on_done)
    return [results[name] for name in names]


def progress_printer(describe: Callable[[Any], str]) -> OnDone:
    """An `on_done` printing `[k/N] name: <describe(result)>, wall X s` for each run."""

    def show(finished: Finished) -> None:
        width = len(str(finished.total))
        print(f"  [{finished.done:{width}}/{finished.total}] {finished.name}: "
              f"{describe(finished.result)}, wall {finished.wall_s:.1f} s", flush=True)

    return show


# -- where the runs go ---------------------------------------------------------------------------


def _in_process(runs: list[Run], on_done: OnDone) -> dict[str, Any]:
    results = {}
    for done, run in enumerate(runs, 1):
        try:
            result, wall = _timed(run, run.log)
        except Exception as error:
            error.add_note(f"in the run {run.name}")
            raise
        results[run.name] = result
        on_done(Finished(run.name, result, wall, done, len(runs)))
    return results


def _in_pool(runs: list[Run], size: int, on_done: OnDone) -> dict[str, Any]:
    print(f"{_count(runs)}, {size} at a time in a pool of processes", flush=True)
    results = {}
    with ProcessPoolExecutor(max_workers=size) as pool:
        futures = {pool.submit(_in_a_pool_process, run): run for run in runs}
        for done, future in enumerate(as_completed(futures), 1):
            run = futures[future]
            try:
                result, wall = future.result()
            except Exception as error:
                pool.shutdown(wait=False, cancel_futures=True)
                error.add_note(f"in the run {run.name}")
                raise
            results[run.name] = result
            on_done(Finished(run.name, result, wall, done, len(runs)))
    return results


def _on_dask(runs: list[Run], address: str, on_done: OnDone) -> dict[str, Any]:
    client_class, as_completed_on_dask = _dask()
    try:
        client = client_class(address, timeout=DASK_CONNECT_TIMEOUT)
    except (OSError, ValueError) as error:  # TimeoutError is an OSError
        raise InvalidInput("--dask", f"no Dask scheduler answers at {address}: "
                                     f"{error}") from None
    results = {}
    with client:
        print(f"{_count(runs)} on the Dask cluster at {address} ({len(client.nthreads())} "
              f"workers now)", flush=True)
        # a readable key per run, for the Dask dashboard; unique, as a cluster outlives sweeps
        futures = {client.submit(_on_a_dask_worker, run, pure=False,
                                 key=f"{run.name}-{uuid.uuid4().hex[:8]}"): run
                   for run in runs}
        for done, future in enumerate(as_completed_on_dask(futures), 1):
            run = futures[future]
            try:
                result, wall, log_bytes = future.result()
            except Exception as error:
                client.cancel(list(futures))
                error.add_note(f"in the run {run.name}")
                raise
            future.release()  # the cluster may forget it (a log can be large)
            if log_bytes is not None:
                run.log.write_bytes(log_bytes)
            results[run.name] = result
            on_done(Finished(run.name, result, wall, done, len(runs)))
    return results


def _count(runs: list[Run]) -> str:
    return f"{len(runs)} run{'' if len(runs) == 1 else 's'}"


def _dask() -> tuple[type, Callable]:
    """Dask's client class and its `as_completed`, imported only when a sweep asks for it."""
    try:
        from dask.distributed import Client, as_completed
    except ImportError:
        raise InvalidInput("--dask", f"Dask is not installed here: {INSTALL_DASK}") from None
    return Client, as_completed


# -- what runs where the run goes (top-level functions: the pool and Dask pickle them) ----------


def _timed(run: Run, log: Path | None) -> tuple[Any, float]:
    started = time.perf_counter()
    result = run.function(*run.args) if run.log is None else run.function(*run.args, log=log)
    return result, time.perf_counter() - started


def _in_a_pool_process(run: Run) -> tuple[Any, float]:
    """The run, silent, writing its log in place: the pool shares this machine's folders."""
    with _silenced(), _portable_errors():
        return _timed(run, run.log)


def _on_a_dask_worker(run: Run) -> tuple[Any, float, bytes | None]:
    """The run, silent, its log written into a temporary folder here and sent back as bytes:
    the worker may be another machine."""
    with _silenced(), _portable_errors():
        if run.log is None:
            return *_timed(run, None), None
        with tempfile.TemporaryDirectory(prefix="megha-sweep-") as folder:
            log = Path(folder) / run.log.name
            result, wall = _timed(run, log)
            return result, wall, log.read_bytes() if log.exists() else None


@contextlib.contextmanager
def _silenced() -> Iterator[None]:
    with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink), \
            contextlib.redirect_stderr(sink):
        yield


@contextlib.contextmanager
def _portable_errors() -> Iterator[None]:
    """A run's error as one that survives the trip back to the parent: an exception whose
    constructor takes other arguments than its message cannot be unpickled (the pool would
    report only that a process died); it goes back as a RuntimeError with its text and its
    traceback instead."""
    try:
        yield
    except Exception as error:
        try:
            pickle.loads(pickle.dumps(error))
        except Exception:
            portable = RuntimeError(f"{type(error).__name__}: {error}")
            portable.add_note("".join(traceback.format_exception(error)).rstrip())
            raise portable from None
        raise


def _rebuild_invalid_input(field: str, message: str) -> InvalidInput:
    return InvalidInput(field, message)


# InvalidInput takes (field, message), not the one text pickle would give it back: taught here
# how to cross processes, a run's bad input still ends `megha` with its message, not a
# traceback. Registered on import, in every process that runs or gathers runs.
copyreg.pickle(InvalidInput, lambda error: (_rebuild_invalid_input,
                                            (error.field, error.message)))
