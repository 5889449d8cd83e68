"""Every event the code can write is documented in docs/events.md, and the page lists no
other: the names come from the source (tests/log_event_names.py), the page's from the first
column of its tables."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from log_event_names import ROOT, Source, UnknownEventName, event_names

PAGE = ROOT / "docs" / "events.md"


def documented(page: str) -> set[str]:
    """The backquoted names in the first cell of each row of the page's event tables (those
    whose header's first cell is `event`)."""
    names: set[str] = set()
    in_table = False
    for line in page.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if not line.startswith("|"):
            in_table = False
        elif cells[0] == "event":
            in_table = True
        elif in_table and not set(cells[0]) <= set("-: "):
            found = re.findall(r"`([a-z_]+)`", cells[0])
            assert found, f"docs/events.md: a row without an event name: {line}"
            names.update(found)
    return names


@pytest.fixture(scope="module")
def written() -> dict[str, list[str]]:
    return event_names()


def test_every_event_the_code_can_write_is_documented(written) -> None:
    missing = {name: places for name, places in written.items()
               if name not in documented(PAGE.read_text())}
    assert not missing, f"events to document in docs/events.md: {missing}"


def test_the_page_lists_no_event_the_code_cannot_write(written) -> None:
    unknown = documented(PAGE.read_text()) - set(written)
    assert not unknown, f"docs/events.md lists events nothing writes: {sorted(unknown)}"


def test_the_lines_of_every_emitter_are_found(written) -> None:
    """A collector that lost track of a way of logging would find too little: one line
    of each way, and of each emitter, must be among the names."""
    assert {"task_placed", "job_done", "job_failed",  # GM core: a literal, a choice
            "task_lost", "task_preempted",  # LM core: its table of ends
            "worker_unknown_attempt",  # worker core: a helper that makes the Log
            "gm_starting", "log",  # services: EventLog.emit
            "broker_connected",  # the broker's `events` callback
            "lm_unreachable", "task_events_flowing",  # PeerLink's names, given by its users
            "job_rejected",  # the simulator: SimLog.emit
            } <= set(written)


NEW_LINES = '''
from common.commands import Log


def run(step, late):
    step.emit(Log("pkg_started", {}))
    name = "pkg_late" if late else "pkg_on_time"
    step.emit(Log(name, {}))
    step.emit(_line("pkg_from_helper"))


def _line(event):
    return Log(event, {})


class Service:
    def __init__(self, log):
        self.log = log

    def start(self):
        self.log.emit("pkg_service_started", {})
'''


def package(root: Path, source: str) -> Source:
    (root / "pkg").mkdir()
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "core.py").write_text(source)
    return Source(("pkg",), root)


def test_a_new_event_is_found_however_it_is_named(tmp_path: Path) -> None:
    assert set(event_names(package(tmp_path, NEW_LINES))) == {
        "pkg_started", "pkg_late", "pkg_on_time", "pkg_from_helper", "pkg_service_started"}


def test_a_name_the_collector_cannot_work_out_is_an_error(tmp_path: Path) -> None:
    source = package(tmp_path, "def run(step, kind):\n    step.emit(Log(f'pkg_{kind}', {}))\n")
    with pytest.raises(UnknownEventName, match="pkg/core.py:2"):
        event_names(source)
