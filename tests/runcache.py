"""One session cache of finished runs, shared by every test and every pytest-xdist worker.

A run is made once per session for each (lab, resolved config): the key is the lab and the
spec's config hash, so two specs that resolve to the same config (another name, overrides
written another way) share one run. Tests get either the cached folder itself, to read
(:meth:`RunCache.path`), or their own copy, to change (:meth:`RunCache.copy`; a copy is
milliseconds). Nothing may change a cached folder: its digest (every relative path and the
bytes of every file) is written when the run finishes and checked again at the end of the
session by every worker that used it (``tests/conftest.py``), so a test that writes into a
cached run fails the session with the folder's name.

Across workers one file lock per key makes sure that exactly one process trains a run and
the others wait for it (:func:`made_once`, which also serves inputs that are not one run);
a folder whose marker is missing was left by a worker that died mid-run and is made again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

from filelock import FileLock

from stagewise import RunSpec, execute_spec
from stagewise.labs import spec_hash

NTP_SHORT = {"train": {"steps_stage1": 20, "steps_stage2": 20}}
"""NTP Example 1 cut to 20 + 20 steps: the finished NTP run the report, safety, reliability and
CLI tests share (a second; both stages logged, claims testable)."""
EXAMPLE1_SHORT = RunSpec(lab="ntp", preset="example1", overrides=NTP_SHORT, name="example1-short")


def smoke_spec(lab: str) -> RunSpec:
    """A lab's smoke run (``Lab.smoke``), as the conformance suite runs it."""
    from stagewise.labs import get_lab

    return RunSpec(lab=lab, overrides=dict(get_lab(lab).smoke), name="smoke")


DONE = "done"  # beside each folder made once, ``{name}.done``: written last, so its presence means the folder is complete
LOCK_TIMEOUT_S = 1800  # a worker waits at most this long for another worker's folder


def made_once(root: Path, name: str, make: Callable[[Path], str]) -> Path:
    """``root/name``, filled by ``make(folder)`` once for every process of the session (one
    file lock per name); ``make`` creates the folder and returns the text of its ``{name}.done``
    marker. A folder without its marker was left by a worker that died while making it: it is
    removed and made again."""
    folder, done = root / name, root / f"{name}.{DONE}"
    with FileLock(str(root / f"{name}.lock"), timeout=LOCK_TIMEOUT_S):
        if not done.exists():
            if folder.exists():
                shutil.rmtree(folder)
            done.write_text(make(folder))
    return folder


def folder_digest(root: Path) -> str:
    """SHA-256 over the sorted relative paths and contents of every file under ``root``."""
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def spec_key(spec: RunSpec) -> str:
    """``{lab}-{config hash}``: the cache key of a spec (its name does not count)."""
    return f"{spec.lab}-{spec_hash(spec)}"


class RunCache:
    """Finished runs under ``root`` (one folder per key), made at first need."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.used: set[str] = set()  # the keys this process built or handed out

    def path(self, spec: RunSpec) -> Path:
        """The cached run folder of ``spec`` (made now if no process has made it): read it,
        never write into it (use :meth:`copy` for that)."""
        key = spec_key(spec)

        def run(folder: Path) -> str:  # the marker holds the finished folder's digest
            manifest = execute_spec(spec, folder, raise_on_failure=True)
            if manifest["status"] != "done":
                raise RuntimeError(f"cached run {key} ended {manifest['status']}: {manifest.get('error')}")
            return json.dumps({"key": key, "spec": spec.to_json(), "sha256": folder_digest(folder)})

        folder = made_once(self.root, key, run)
        self.used.add(key)
        return folder

    def copy(self, spec: RunSpec, dest: Path) -> Path:
        """A private copy of the cached run of ``spec`` at ``dest`` (which must not exist)."""
        shutil.copytree(self.path(spec), dest)
        return Path(dest)

    def changed(self) -> list[str]:
        """The keys this process used whose folder no longer has its recorded digest."""
        out = []
        for key in sorted(self.used):
            recorded = json.loads((self.root / f"{key}.{DONE}").read_text())["sha256"]
            if folder_digest(self.root / key) != recorded:
                out.append(key)
        return out


@contextlib.contextmanager
def without_run_figures(labs: tuple[str, ...] = ("ntp", "disentangled")) -> Iterator[None]:
    """Runs made in this process inside the block (``stagewise run``, sweeps with one worker,
    reproduce's in-process runs) skip their figures: for tests of sweep folders, locks, resumes
    and readers, where a small run's figures (most of its time) are not what is tested; the
    plot and report tests check them. The ``no_run_figures`` fixture wraps a test in it."""
    import dataclasses

    from stagewise.labs import REGISTRY

    with contextlib.ExitStack() as stack:
        for name in labs:
            stack.enter_context(REGISTRY.registered(dataclasses.replace(REGISTRY[name], make_figures=lambda *a: [])))
        yield
