"""The writer lock of a run directory (and of a sweep's runs): ``ROOT/.lock``, an ``flock``.

A lock another process holds is :class:`LockHeld`; a ``.lock`` that is not a lockable file
(a directory, no permission) is a one-line UserError naming it; any other OSError (a full
disk while writing the pid) propagates after the file is closed and the lock let go.
"""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path
from typing import Any

from ..errors import UserError

_UMASK = os.umask(0)
os.umask(_UMASK)
FILE_MODE = 0o666 & ~_UMASK  # what open() would give: every file of a run has the same mode


class LockHeld(UserError):
    """Another process holds the lock (a sweep waits for it or leaves the run to it)."""


class RunLock:
    """An exclusive, non-blocking ``flock`` on ``ROOT/.lock``: one writer per run directory.

    The lock dies with its process (a kill -9 releases it), so a stale lock file never
    blocks a later ``--resume``.
    """

    def __init__(self, root: str | Path):
        self.path = Path(root) / ".lock"
        self._fd: int | None = None

    def acquire(self) -> "RunLock":
        """Take the lock and write this process's pid into it. LockHeld when another process
        holds it; UserError when ``.lock`` is a directory or cannot be opened; OSError else."""
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, FILE_MODE)
        except IsADirectoryError:
            raise UserError(f"{self.path}: is a directory, not a lock file; remove it (rmdir {self.path}) "
                            "and run again") from None
        except PermissionError as err:
            raise UserError(f"{self.path}: the lock file cannot be opened ({err.strerror}); make it and its folder "
                            "writable for this user, or remove it, and run again") from None
        except OSError as err:
            if err.errno == errno.ELOOP:  # O_NOFOLLOW: a link would have the pid written into its target
                raise UserError(f"{self.path}: is a symbolic link; a lock file is never followed (remove it and run "
                                "again)") from None
            raise
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            os.close(fd)
            if err.errno in (errno.EAGAIN, errno.EACCES):
                raise LockHeld(f"{self.path.parent}: another stagewise process is writing this run directory; "
                               "wait for it to finish or stop it first") from None
            raise
        try:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
        except BaseException:  # a full disk: let go of the lock, or this process would hold it while not running
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
            raise
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> "RunLock":
        return self.acquire()

    def __exit__(self, *exc: Any) -> None:
        self.release()
