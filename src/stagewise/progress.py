"""Progress for everything that can take more than a few seconds, wherever it runs.

One :class:`Progress` per piece of long work (a training loop, a sweep's points, a floors
solve, a sweep's planning) shows itself three ways at once:

- on a terminal (stderr is a TTY): a rich bar (steps, ETA), removed when done;
- elsewhere (a log file, CI, a notebook, a pipe): a plain line on stderr every
  :data:`PLAIN_EVERY_S` seconds while the work lasts, whether or not a unit ended meanwhile
  (a daemon thread; ``STAGEWISE_PROGRESS_EVERY`` overrides the interval, from
  :data:`MIN_EVERY_S` to :data:`MAX_EVERY_S`; ``0`` turns the lines off), e.g.
  ``training: 1200/6000 steps (20%), 41 s elapsed, ETA 2 min 44 s``;
- to Python callbacks: :func:`on_progress` registers one for a block of code, and every
  ``execute``/``execute_spec`` takes ``progress=callable``; each gets a
  :class:`ProgressEvent` at most every :data:`CALLBACK_EVERY_S` seconds and at the end.

``quiet`` (the CLI's ``-q``) turns the bar and the lines off; callbacks still get events.
Costs nothing measurable next to training: ``advance`` is a counter update and a clock read.

Example::

    from stagewise.progress import on_progress
    with on_progress(lambda e: print(e.what, e.done, e.total, e.eta_s)):
        stagewise.execute_spec(spec, "runs/x")
"""

from __future__ import annotations

import math
import os
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator

PLAIN_EVERY_S = 10.0      # outside a terminal: at most one progress line per this many seconds
CALLBACK_EVERY_S = 0.5    # Python callbacks: at most one event per this many seconds (and one at the end)
ENV_EVERY = "STAGEWISE_PROGRESS_EVERY"

MIN_EVERY_S = 0.1
"""The shortest interval ``$STAGEWISE_PROGRESS_EVERY`` may set: at most ten lines a second (0.001
printed thousands of lines in a few seconds); the tests that watch the lines come use it."""

MAX_EVERY_S = 86_400.0
"""The longest interval ``$STAGEWISE_PROGRESS_EVERY`` may set: one day (beyond it there is no line
worth waiting for, and a huge value such as 1e23 overflows the ticker's wait); 0 turns the lines off."""


@dataclass(frozen=True)
class ProgressEvent:
    """Where one piece of long work stands.

    Attributes:
        what: its label (``training``, ``sweep``, ``floors``, ...).
        done: units done (steps, points, solves), resumed ones included.
        total: units in all.
        unit: what a unit is (``steps``, ``points``, ...).
        elapsed_s: seconds since this process started the work.
        eta_s: seconds left at the rate so far (``None`` before any unit was done here).
        detail: the latest unit's own text (e.g. ``done point-3``), may be empty.
    """

    what: str
    done: int
    total: int
    unit: str
    elapsed_s: float
    eta_s: float | None
    detail: str = ""

    @property
    def fraction(self) -> float:
        return self.done / self.total if self.total else 1.0

    def line(self) -> str:
        """The plain progress line."""
        eta = f", ETA {_duration(self.eta_s)}" if self.eta_s is not None and self.done < self.total else ""
        detail = f" ({self.detail})" if self.detail else ""
        return (f"{self.what}: {self.done}/{self.total} {self.unit} ({100 * self.fraction:.0f}%), "
                f"{_duration(self.elapsed_s)} elapsed{eta}{detail}")


ProgressCallback = Callable[[ProgressEvent], None]
_CALLBACKS: list[ProgressCallback] = []
_BARS: list["Progress"] = []  # the rich bars shown now: one at a time (rich allows one live display per console)


@contextmanager
def on_progress(callback: ProgressCallback) -> Iterator[None]:
    """Send every :class:`ProgressEvent` of the work done inside the block to ``callback``
    (this process only: a sweep's workers report through the sweep's own points progress)."""
    _CALLBACKS.append(callback)
    try:
        yield
    finally:
        _CALLBACKS.remove(callback)


def plain_every_s() -> float:
    """The plain-line interval: ``$STAGEWISE_PROGRESS_EVERY`` when set (``0``: no lines), else
    :data:`PLAIN_EVERY_S`. Anything else than 0 or a number of seconds from :data:`MIN_EVERY_S`
    to :data:`MAX_EVERY_S` (a word, NaN, a negative, 0.001, 1e23) is one UserError line naming
    the variable; the CLI asks before any command runs, so nothing is made."""
    raw = os.environ.get(ENV_EVERY)
    if raw is None or raw == "":
        return PLAIN_EVERY_S
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if value == 0 or MIN_EVERY_S <= value <= MAX_EVERY_S:  # NaN fails both
        return value
    from .errors import UserError

    raise UserError(f"{ENV_EVERY}={raw.strip()!r}: must be 0 (no progress lines) or a number of seconds from "
                    f"{MIN_EVERY_S:g} to {MAX_EVERY_S:.0f} (one day); the default is {PLAIN_EVERY_S:g}")


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    seconds = max(0.0, seconds)
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes, secs = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f"{minutes} min {secs} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min"


class Progress:
    """``with Progress(total, "training", unit="steps", start=done) as bar: bar.advance()``:
    a rich bar on a terminal, plain lines elsewhere, events to the callbacks (module doc).

    Args:
        total: units in all.
        what: the label.
        unit: what a unit is.
        start: units already done (a resumed run); the rate and ETA count only those done here.
        quiet: no bar and no lines (callbacks still called).
        transient: remove the rich bar when done (a sweep's bar stays).
        lazy_bar: start the rich bar with the first unit done (an error raised before any
            stays one line on a terminal).
        stream: where the bar and lines go (default: stderr).
        callbacks: more callbacks, beside those of :func:`on_progress`.
    """

    def __init__(self, total: int, what: str, *, unit: str = "steps", start: int = 0, quiet: bool = False,
                 transient: bool = True, lazy_bar: bool = False, stream: Any = None,
                 callbacks: tuple[ProgressCallback, ...] = ()):
        self.total, self.what, self.unit = int(total), what, unit
        self.done = self._start = int(start)
        self.quiet, self.transient = quiet, transient
        self._stream = stream
        self._callbacks = (*_CALLBACKS, *callbacks)
        self._bar: Any = None
        self._task: Any = None
        self._every = 0.0
        self._began = self._last_call = 0.0
        self._lazy_bar, self._want_bar = lazy_bar, False
        self._ticker: threading.Thread | None = None
        self._ended = threading.Event()
        self.detail = ""

    @property
    def stream(self) -> Any:
        return self._stream if self._stream is not None else sys.stderr

    # the three outputs ----------------------------------------------------------------
    def __enter__(self) -> "Progress":
        self._began = time.monotonic()
        if not self.quiet:
            if getattr(self.stream, "isatty", lambda: False)():
                self._want_bar = not _BARS  # work inside work with a bar (floors inside a run): the outer bar only
                if self._want_bar and not self._lazy_bar:
                    self._start_bar()
            else:
                self._every = plain_every_s()
                if self._every:
                    self._ticker = threading.Thread(target=self._tick, name="stagewise-progress", daemon=True)
                    self._ticker.start()
        return self

    def _start_bar(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn
        from rich.progress import Progress as RichProgress

        self._bar = RichProgress(TextColumn("{task.fields[what]}", markup=False), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), TimeRemainingColumn(), TextColumn("{task.fields[detail]}", markup=False),
                                 console=Console(file=self.stream), transient=self.transient)
        self._bar.start()
        _BARS.append(self)
        self._task = self._bar.add_task("", total=self.total, completed=self.done, what=self.what, detail=self.detail)

    def _tick(self) -> None:
        while not self._ended.wait(self._every):
            self.print_line()

    def advance(self, n: int = 1, detail: str = "") -> None:
        """``n`` more units done; ``detail`` says what the latest was (shown beside the count)."""
        self.done += n
        if detail:
            self.detail = detail
        if self._want_bar:
            if self._bar is None:
                self._start_bar()
            self._bar.update(self._task, advance=n, detail=self.detail)
        if self._callbacks:
            now = time.monotonic()
            if now - self._last_call >= CALLBACK_EVERY_S or self.done >= self.total:
                self._last_call = now
                self._call()

    __call__ = advance  # a training loop's ``advance(n=1)``

    def note(self, detail: str) -> None:
        """Say where the current unit is (e.g. ``Newton iteration 12``) without finishing it."""
        self.detail = detail
        if self._bar is not None:
            self._bar.update(self._task, detail=detail)

    def event(self) -> ProgressEvent:
        elapsed = time.monotonic() - self._began
        here = self.done - self._start
        eta = elapsed / here * max(0, self.total - self.done) if here > 0 else None
        return ProgressEvent(self.what, self.done, self.total, self.unit, elapsed, eta, self.detail)

    def print_line(self) -> None:
        try:
            print(self.event().line(), file=self.stream, flush=True)
        except (OSError, ValueError):  # a closed or broken stream never stops the work
            self._ended.set()

    def console_print(self, text: str) -> None:
        """A line of its own (e.g. a failed point), above the bar on a terminal."""
        if self._bar is not None:
            self._bar.console.print(text, highlight=False, markup=False, soft_wrap=True)
        elif not self.quiet:
            print(text, file=self.stream, flush=True)

    def _call(self) -> None:
        event = self.event()
        for callback in self._callbacks:
            callback(event)

    def __exit__(self, *exc: Any) -> None:
        self._ended.set()
        if self._ticker is not None:
            self._ticker.join(timeout=1.0)
        if self._bar is not None:
            self._bar.stop()
            _BARS.remove(self)
        if self._callbacks and self.done < self.total:
            self._call()  # where it stopped (a stop request, an error)
