"""Stop requests: SIGINT and SIGTERM as an exception, raised once.

A long command (a run, a sweep, a reproduction, a floors solve, a BLiMP evaluation) must
never die silently on a signal: the default SIGTERM action ends the process with nothing
recorded, and a second signal arriving while the first one's stop is being recorded would
do the same. :class:`StopSignals` turns the first SIGINT or SIGTERM into
:class:`Interrupted` (exit code 128 + signum) and ignores the later ones while that stop is
handled, so the code that records the interrupt always finishes. A run's own handler
(:meth:`~stagewise.runs.context.RunDirContext.request_stop`: checkpoint at the next step)
replaces it while training and restores it after.

Light on purpose (no torch, no pandas): the CLI installs it before any command runs.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType, TracebackType
from typing import Any

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_ACTIVE: list["StopSignals"] = []  # the installed StopSignals, outermost first


class Interrupted(KeyboardInterrupt):
    """A stop request (SIGINT or SIGTERM); ``signum`` says which (exit code 128 + signum)."""

    def __init__(self, signum: int = signal.SIGINT):
        self.signum = signum
        super().__init__(signal.Signals(signum).name)


def note_stop(signum: int) -> None:
    """A stop is under way (a run's own handler caught it): the installed :class:`StopSignals`
    ignore later signals too, so nothing after the run (the CLI's last line) is cut off."""
    for stops in _ACTIVE:
        if stops.signum is None:
            stops.signum = signum


def signum_of(err: BaseException) -> int:
    """The signal behind a stop: ``Interrupted.signum``, SIGINT for a plain KeyboardInterrupt."""
    return int(getattr(err, "signum", signal.SIGINT))


class StopSignals:
    """``with StopSignals():`` the first SIGINT/SIGTERM raises :class:`Interrupted` in the
    main thread; later ones are ignored (the stop is being handled). Elsewhere than the main
    thread it installs nothing. On exit the previous handlers come back.

    Attributes:
        signum: the signal that asked for the stop (``None`` before one came).
    """

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is not None:
            return  # a stop is already under way: finishing it is what the user asked for
        self.signum = signum
        raise Interrupted(signum)

    def __enter__(self) -> "StopSignals":
        if threading.current_thread() is threading.main_thread():
            self._previous = {s: signal.getsignal(s) for s in STOP_SIGNALS}
            for sig in STOP_SIGNALS:
                signal.signal(sig, self._handle)
            _ACTIVE.append(self)
        return self

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        if self in _ACTIVE:
            _ACTIVE.remove(self)
