"""Workers die with the sweep that started them: a parent-death signal and a watchdog.

A sweep's local workers (the process pool's, submitit-local's jobs) would otherwise outlive
a SIGKILL of the sweep process: they keep running queued runs, hold memory and keep the
sweep's stdout open (a caller reading it never sees EOF). Two mechanisms, either enough:

- Linux: ``prctl(PR_SET_PDEATHSIG, SIGKILL)`` in the worker, so the kernel kills it when
  its parent dies. The signal fires when the parent *thread* that spawned the worker exits;
  CPython 3.11's ``ProcessPoolExecutor`` spawns its workers in ``submit`` (the sweep's own
  thread, which lives as long as the pool; without ``max_tasks_per_child`` the manager
  thread never spawns), and the watchdog covers any other case.
- Everywhere: a daemon thread polling every :data:`PARENT_POLL_S` whether the watched
  process is still there (a direct parent: ``os.getppid()`` changes when it dies; another
  process: its ``/proc`` start time, a zombie counting as gone), then SIGKILLs its own
  process (the run's lock dies with it; the next sweep resumes the run from its checkpoint).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time
from pathlib import Path

PARENT_POLL_S = 0.5   # how often a worker checks that the sweep is still alive
PR_SET_PDEATHSIG = 1  # linux/prctl.h
STAT_STATE, STAT_START = 0, 19  # /proc/PID/stat fields after "pid (comm)": state, start time (clock ticks)


def set_death_signal(sig: int = signal.SIGKILL) -> bool:
    """Ask the kernel to send ``sig`` to this process when its parent dies (Linux only)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def process_start(pid: int) -> str | None:
    """The start time of ``pid`` (``/proc``; it tells a process from a later one with its
    pid); ``None`` when it is gone or a zombie, ``""`` where ``/proc`` is missing."""
    if not Path("/proc/self/stat").is_file():
        try:
            os.kill(pid, 0)
            return ""
        except ProcessLookupError:
            return None
        except PermissionError:
            return ""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[STAT_STATE] in ("Z", "X") else fields[STAT_START]


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def watch(pid: int, start: str | None = None, *, parent: bool = False) -> threading.Thread:
    """A daemon thread that kills this process once ``pid`` is gone: ``parent`` (``pid`` is
    this process's parent) checks ``os.getppid()``, otherwise ``pid``'s start time must stay
    ``start`` (:func:`process_start` of it, taken in that process)."""
    start = process_start(pid) if start is None and not parent else start

    def gone() -> bool:
        return os.getppid() != pid if parent else process_start(pid) != start

    def loop() -> None:
        while not gone():
            time.sleep(PARENT_POLL_S)
        _die()

    if gone():
        _die()
    thread = threading.Thread(target=loop, name="stagewise-parent-watchdog", daemon=True)
    thread.start()
    return thread


def pool_worker_init(parent_pid: int) -> None:
    """``ProcessPoolExecutor`` initializer: die with the sweep process ``parent_pid``, in a
    process group of its own (a terminal's Ctrl-C goes to the sweep, which passes the stop on
    once: :func:`~stagewise.orchestrate.executors.run_local`)."""
    if hasattr(os, "setpgid"):
        try:
            os.setpgid(0, 0)
        except OSError:
            pass
    set_death_signal()
    watch(parent_pid, parent=True)  # also catches a parent that died before the prctl
