"""One scrape for the whole server under `taguru serve --workers N`.

The workers share one port (SO_REUSEPORT), so a scrape reaches whichever worker the kernel picks.
So that every scrape shows the same server, the supervisor makes one private directory
(`SharedMetricsDir`, mode 0700, removed when it stops) and names it to its workers as
`PROMETHEUS_MULTIPROC_DIR`: prometheus-client then keeps every worker's values in memory-mapped
files there (its multiprocess mode), and a scrape merges the files of every worker
(`scrape_registry`):

- counters and histograms add up over every worker that ever ran under this supervisor (a
  replaced worker's counts stay, so `rate()` never sees a counter go back);
- gauges are aggregated over the live workers by the rule each declares (server/metrics.py);
  a worker writes the gauges it reads from its own state every second and before it answers a scrape;
- the `process_*` families are rendered for each live worker, with a `pid` label (read from
  `/proc/<pid>`); `python_info` once; the garbage-collector families, which only a process itself
  can read, are not rendered.

Each worker leaves a marker file (`worker-<pid>`) beside the value files; the supervisor removes a
dead worker's marker and its live gauges (`mark_process_dead`).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from prometheus_client import PLATFORM_COLLECTOR, CollectorRegistry, ProcessCollector, values
from prometheus_client.metrics_core import Metric
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead

from taguru_server.server.metrics import VIOLATIONS_FAMILY
from taguru_server.server.variables import export

VARIABLE = "PROMETHEUS_MULTIPROC_DIR"
MARKER = "worker-"


PREFIX = "taguru-metrics-"


class SharedMetricsDir:
    """The supervisor's directory of the workers' metric files (`taguru-metrics-<pid>-…` under the
    temporary directory): made at start, removed at the end; a start also removes the directories
    of this user's supervisors that are gone without removing theirs (killed with SIGKILL)."""

    def __init__(self, parent: str | None = None) -> None:
        parent = parent or tempfile.gettempdir()
        sweep_orphans(parent)
        self.path = tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-", dir=parent)

    def worker_exited(self, pid: int) -> None:
        """A worker is gone: its live gauges stop counting (its counters stay, as they were)."""
        mark_process_dead(pid, self.path)
        Path(self.path, f"{MARKER}{pid}").unlink(missing_ok=True)

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def sweep_orphans(parent: str) -> list[str]:
    """Remove the metric directories in `parent` this user's gone supervisors left; returns their names."""
    removed = []
    for entry in os.listdir(parent):
        pid = entry[len(PREFIX) :].split("-", 1)[0]
        path = os.path.join(parent, entry)
        if not entry.startswith(PREFIX) or not pid.isdigit() or _alive(int(pid)):
            continue
        try:
            if os.stat(path).st_uid != os.getuid():
                continue
        except OSError:
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(entry)
    return removed


def _alive(pid: int) -> bool:
    """Whether a process with this pid exists (one of another user's counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def join_shared_files(path: str) -> None:
    """In a worker: keep this process's metric values in the shared files of `path` (before any metric
    is made), and leave the marker that lists this worker's process families."""
    export(VARIABLE, path)  # prometheus-client opens its files under the variable's directory
    if values.ValueClass is values.MutexValue:  # a forked worker: the module was imported before the variable was set
        values.ValueClass = values.MultiProcessValue()
    Path(path, f"{MARKER}{os.getpid()}").touch()


def live_workers(path: str) -> list[int]:
    """The pids of the workers whose markers are in `path`, in order."""
    pids = []
    for entry in os.listdir(path):
        if entry.startswith(MARKER) and entry[len(MARKER) :].isdigit():
            pids.append(int(entry[len(MARKER) :]))
    return sorted(pids)


class WorkerProcesses:
    """The `process_*` families of every live worker, one row per worker with a `pid` label."""

    def __init__(self, path: str) -> None:
        self.path = path

    def collect(self) -> Iterator[Metric]:
        families: dict[str, Metric] = {}
        for pid in live_workers(self.path):
            for family in ProcessCollector(pid=lambda pid=pid: pid, registry=None).collect():  # type: ignore[misc]
                merged = families.setdefault(family.name, Metric(family.name, family.documentation, family.type))
                for sample in family.samples:
                    merged.add_sample(sample.name, {**sample.labels, "pid": str(pid)}, sample.value)
        yield from families.values()


class _Sorted:
    """The merged families of the value files, in name order (the files are read in directory order),
    but the one the per-context rows read (`VIOLATIONS_FAMILY`), which is never rendered as such."""

    def __init__(self, path: str) -> None:
        self.merged = MultiProcessCollector(None, path=path)

    def collect(self) -> Iterable[Metric]:
        families = [family for family in self.merged.collect() if family.name != VIOLATIONS_FAMILY]
        return sorted(families, key=lambda family: family.name)


def shared_violations(path: str) -> dict[str, int]:
    """Every worker's schema violations by context, summed (the per-context rows' counts)."""
    counts: dict[str, int] = {}
    for family in MultiProcessCollector(None, path=path).collect():
        if family.name == VIOLATIONS_FAMILY:
            for sample in family.samples:
                if sample.name.endswith("_total"):
                    counts[sample.labels["context"]] = int(sample.value)
    return counts


def scrape_registry(path: str) -> CollectorRegistry:
    """A registry over every worker's values in `path`, for one scrape."""
    registry = CollectorRegistry()
    for collector in (_Sorted(path), WorkerProcesses(path), PLATFORM_COLLECTOR):
        registry.register(collector)
    return registry
