"""A rich status spinner that shows only when the work it watches lasts longer than a moment."""

from __future__ import annotations

import threading
from types import TracebackType

from rich.console import Console
from rich.status import Status

AFTER_S = 1.0  # runs shorter than this show no spinner, so quick ones print exactly their result


class LazyStatus:
    """A context manager: a transient `rich.status.Status` on `console`, started only after `after_s`
    (default `AFTER_S`).

    Nothing is shown when `enabled` is false (JSON output, or the console is not a terminal), and the
    spinner is gone before the block ends, so it never mixes with what is printed afterwards.
    """

    def __init__(self, console: Console, message: str, enabled: bool, after_s: float | None = None) -> None:
        self._console, self._message, self._enabled = console, message, enabled
        self._after_s = AFTER_S if after_s is None else after_s
        self._lock = threading.Lock()
        self._status: Status | None = None
        self._closed = False
        self._timer: threading.Timer | None = None

    def __enter__(self) -> LazyStatus:
        if self._enabled:
            self._timer = threading.Timer(self._after_s, self._start)
            self._timer.daemon = True
            self._timer.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
        with self._lock:  # the timer's thread may be starting the spinner right now
            self._closed = True
            if self._status is not None:
                self._status.stop()

    def update(self, message: str) -> None:
        """Say what the work is doing now (shown when the spinner is, or once it starts)."""
        with self._lock:
            self._message = message
            if self._status is not None:
                self._status.update(message)

    @property
    def shown(self) -> bool:
        """Whether the spinner has appeared."""
        return self._status is not None

    def _start(self) -> None:
        """Show the spinner (on the timer's thread), unless the block has already ended."""
        with self._lock:
            if not self._closed:
                self._status = self._console.status(self._message)
                self._status.start()
