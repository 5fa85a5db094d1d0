"""The one thread that runs frames, so the executor thread never waits on the model.

The engine is not thread-safe and a frame takes most of a frame period, so frames run on
a single worker thread, one at a time. The frame timer hands each tick to `submit`; a
tick that finds the previous frame still running is refused rather than queued (the
caller counts an overrun): a queued tick would only produce a chunk that is already
late, while the previous chunk still covers the robot.

The worker calls `on_exit` on its own thread as it ends, which is where the engine is
reset: that keeps every engine call on this one thread even when `stop` gave up waiting
for a long frame and the thread finishes later on its own.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class FrameWorker(Generic[T]):
    """Runs `run(tick)` for each accepted tick on one thread; never raises out of it."""

    def __init__(
        self,
        run: Callable[[T], None],
        *,
        on_error: Callable[[BaseException], None],
        on_exit: Callable[[], None],
        name: str = "oxygen-frames",
    ) -> None:
        self._run = run
        self._on_error = on_error
        self._on_exit = on_exit
        self._cv = threading.Condition()
        self._pending: T | None = None
        self._busy = False
        self._stopping = False
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def submit(self, tick: T) -> bool:
        """Start a frame now; False (nothing started) while one is running or pending."""
        with self._cv:
            if self._stopping or self._busy or self._pending is not None:
                return False
            self._pending = tick
            self._cv.notify()
            return True

    def stop(self, timeout_s: float | None) -> bool:
        """Refuse new ticks, let a running frame finish; True when the thread has ended."""
        with self._cv:
            self._stopping = True
            self._pending = None
            self._cv.notify()
        self._thread.join(timeout_s)
        return not self._thread.is_alive()

    @property
    def busy(self) -> bool:
        with self._cv:
            return self._busy

    def _loop(self) -> None:
        try:
            while (tick := self._next()) is not None:
                try:
                    self._run(tick)
                except Exception as error:  # a failed frame must not end the frame loop
                    self._on_error(error)
                finally:
                    with self._cv:
                        self._busy = False
        finally:
            self._on_exit()

    def _next(self) -> T | None:
        with self._cv:
            while self._pending is None and not self._stopping:
                self._cv.wait()
            if self._stopping:
                return None
            tick, self._pending = self._pending, None
            self._busy = True
            return tick
