"""The writer lock of a run directory (and of a sweep's runs): ``ROOT/.lock``, an ``flock``."""

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


class RunLock:
    """An exclusive, non-blocking ``flock`` on ``ROOT/.lock``: one writer per run directory.

    The lock dies with its process (a kill -9 releases it), so a stale lock file never
    blocks a later ``--resume``.
    """

    def __init__(self, root: str | Path):
        self.path = Path(root) / ".lock"
        self._fd: int | None = None

    def acquire(self) -> "RunLock":
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, FILE_MODE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            os.close(fd)
            if err.errno in (errno.EAGAIN, errno.EACCES):
                raise UserError(f"{self.path.parent}: another stagewise process is writing this run directory; "
                                "wait for it to finish or stop it first") from None
            raise
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
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
