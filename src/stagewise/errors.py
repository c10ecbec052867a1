"""User-facing errors: one clear line each (what is wrong, which value, what is allowed)."""

from __future__ import annotations


class UserError(Exception):
    """Bad input from a user. Carries one or more one-line messages.

    The CLI prints each message on its own line (no traceback) and exits with code 2.
    """

    def __init__(self, *messages: str):
        if not messages:
            raise ValueError("UserError needs at least one message")
        self.messages = tuple(m.replace("\n", " ") for m in messages)
        super().__init__("; ".join(self.messages))
