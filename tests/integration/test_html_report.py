"""`megha inspect --html` as a user runs it, and the report as a browser shows it: two
hand-made event logs in, one self-contained HTML file out, rendered by real headless Chromium
(scripts/chromium.sh) to a screenshot and a DOM whose tables hold the figures worked out by
hand below."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
from matplotlib.image import imread

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]
PLOTS = ("allocation_cdf", "jct_cdf", "share_over_time", "delay_breakdown")
SECTIONS = ("allocation", "breakdown", "jct", "slowdown", "counts", "fairness", "policies")
ODD_USER = "<i>bob</i>"  # a user queue whose name must reach the page as text, not markup

# (job, user, tasks, arrival, done, [(allocation time at scale 1, task duration)])
JOBS = (
    ("j1", "alice", 2, 1000.0, 1002.0, [(0.010, 1.5), (0.020, 1.5)]),
    ("j2", ODD_USER, 1, 1000.5, 1001.5, [(0.030, 0.9)]),
    ("j3", "alice", 1, 1001.0, 1004.0, [(0.100, 2.5)]),
)
# By hand, at scale 1: allocation times 10, 20, 30, 100 ms -> p50 25.0 ms, mean 40.0 ms;
# JCTs 2, 1, 3 s -> p50 2.00 s; slowdowns 2/1.5, 1/0.9, 3/2.5 -> p50 1.20.
# At scale 2 every allocation time doubles: p50 50.0 ms, 2.00x the baseline's.


def write_run(directory: Path, scale: float) -> None:
    """One run's logs as the services write them: gm-1, lm-1 and its worker, one file each."""
    directory.mkdir()
    gm = [{"ts": 999.0, "svc": "gm-1", "event": "gm_starting", "gm": "gm-1",
           "shares": {"alice": 0.6, ODD_USER: 0.4},
           "policies": {"job": "fifo", "fairness": "fair_share"}}]
    lm = [{"ts": 999.0, "svc": "lm-1", "event": "lm_started", "lm": "lm-1", "cpu_m": 4000}]
    worker = []
    for job, user, tasks, arrival, done, task_times in JOBS:
        ids = {"job": job, "user": user, "gm": "gm-1"}
        gm.append({"ts": arrival + 0.0005, "svc": "gm-1", "event": "job_arrived", **ids,
                   "tasks": tasks, "arrival": arrival})
        for index, (allocation, duration) in enumerate(task_times):
            delay = allocation * scale
            task = {"task": f"{job}/{index}", "attempt": f"{job}/{index}#1", **ids}
            gm.append({"ts": arrival + 0.2 * delay, "svc": "gm-1", "event": "task_placed",
                       **task, "lm": "lm-1", "handle_s": 0.0004})
            lm.append({"ts": arrival + 0.5 * delay, "svc": "lm-1", "event": "task_launched",
                       **task, "lm": "lm-1", "cpu_m": 1000, "handle_s": 0.0002})
            worker.append({"ts": arrival + delay, "svc": "lm-1/w0", "event": "task_started",
                           **task, "worker": "lm-1/w0", "duration": duration,
                           "handle_s": 0.00005})
            end = arrival + delay + duration
            worker.append({"ts": end, "svc": "lm-1/w0", "event": "task_finished", **task,
                           "worker": "lm-1/w0"})
            lm.append({"ts": end + 0.001, "svc": "lm-1", "event": "task_finished", **task,
                       "lm": "lm-1", "runtime": duration})
        gm.append({"ts": done, "svc": "gm-1", "event": "job_done", **ids, "tasks": tasks,
                   "arrival": arrival, "reason": ""})
    for name, events in (("gm-1", gm), ("lm-1", lm), ("lm-1_w0", worker)):
        lines = [json.dumps(event, separators=(",", ":")) for event in events]
        if name == "gm-1":
            lines.append('{"ts": 1005.0, "svc": "gm-1", "event": "job_done"')  # cut short
        (directory / f"{name}.log").write_text("\n".join(lines) + "\n")


class Tables(HTMLParser):
    """The rendered page's tables (cell texts by row, by table id) and images (src by id)."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self.images: dict[str, str] = {}
        self._table: str | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        if tag == "table":
            self._table = attributes.get("id", "")
            self.tables[self._table] = []
        elif tag == "tr" and self._table is not None:
            self.tables[self._table].append([])
        elif tag in ("td", "th") and self._table is not None:
            self._cell = []
        elif tag == "img":
            self.images[attributes.get("id", "")] = attributes.get("src", "")

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self.tables[self._table][-1].append("".join(self._cell).strip())
            self._cell = None
        elif tag == "table":
            self._table = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)

    def row(self, table: str, first_cell: str) -> dict[str, str]:
        header, *rows = self.tables[table]
        found = next(row for row in rows if row[0] == first_cell)
        return dict(zip(header, found, strict=True))


@pytest.fixture(scope="session")
def chromium() -> str:
    done = subprocess.run(["bash", "scripts/chromium.sh"], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def browse(chromium: str, profile: Path, *args: str) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
         f"--user-data-dir={profile}", "--window-size=1400,4000", *args],
        capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    return done


def test_html_report_renders_every_table_and_plot_in_chromium(chromium, tmp_path):
    write_run(tmp_path / "base", scale=1.0)
    write_run(tmp_path / "other", scale=2.0)
    report, plots = tmp_path / "report.html", tmp_path / "plots"
    inspect = subprocess.run(
        [sys.executable, "-m", "megha", "inspect", f"base={tmp_path / 'base'}",
         f"other={tmp_path / 'other'}", "--html", str(report), "--plots", str(plots)],
        cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert inspect.returncode == 0, inspect.stdout + inspect.stderr
    assert sorted(p.name for p in plots.iterdir()) == sorted(f"{name}.png" for name in PLOTS)

    text = report.read_text()
    assert "http://" not in text and "https://" not in text  # nothing fetched from anywhere
    assert ODD_USER not in text and "&lt;i&gt;bob&lt;/i&gt;" in text

    screenshot = tmp_path / "report.png"
    browse(chromium, tmp_path / "profile-shot", f"--screenshot={screenshot}", report.as_uri())
    pixels = imread(screenshot)
    # not one colour: a good share of the page differs from its background (the top-left pixel)
    drawn = (pixels != pixels[0, 0]).any(axis=-1).mean()
    assert drawn > 0.02, f"the screenshot is blank ({drawn:.2%} of it drawn)"
    dom = browse(chromium, tmp_path / "profile-dom", "--dump-dom", report.as_uri()).stdout

    page = Tables()
    page.feed(dom)
    for run in ("base", "other"):
        for section in SECTIONS:
            assert f"{section}-{run}" in page.tables, (section, run, sorted(page.tables))
    assert "comparison" in page.tables
    assert sorted(page.images) == sorted(f"plot-{name}" for name in PLOTS)
    for name, src in page.images.items():
        assert src.startswith("data:image/png;base64,"), name
        assert base64.b64decode(src.partition(",")[2])[:8] == b"\x89PNG\r\n\x1a\n", name

    all_tasks = page.row("allocation-base", "all tasks")
    assert (all_tasks["count"], all_tasks["p50 (ms)"], all_tasks["mean (ms)"]) == (
        "4", "25.0", "40.0")
    assert page.row("allocation-other", "all tasks")["p50 (ms)"] == "50.0"
    assert page.row("allocation-base", f"user {ODD_USER}")["max (ms)"] == "30.0"
    assert page.row("jct-base", "all jobs")["p50 (s)"] == "2.00"
    assert page.row("slowdown-base", "all jobs")["p50 (x)"] == "1.20"
    assert page.row("counts-base", "jobs done")["count"] == "3"
    assert page.row("counts-base", "tasks started")["count"] == "4"
    assert page.row("fairness-base", "alice")["configured"] == "60%"
    assert page.row("comparison", "allocation p50 (s)")["other / base"] == "2.00x"
    assert "1 malformed" in " ".join(dom.split())
