"""One log line per reason per period, for warnings that repeat every frame or message.

rclpy's `throttle_duration_sec` throttles per call site: one `warning(...)` line in the
frame loop that reports every skip reason would show whichever reason came first and hide
the others for the period. A peer that floods ~/request, or a camera that keeps sending a
bad image, must cost one line per period, yet a second, different fault must still show.
`KeyedThrottle` keeps the last time per key (a skip reason, a camera slot) on the steady
clock and says how many lines it held back, so the log still tells how often it happened.
Keys come from fixed sets (skip reasons, image slots, a few names), so the table stays
small whatever arrives.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

DEFAULT_PERIOD_S = 2.0


class KeyedThrottle:
    """Admits the first line of each key, then one per `period_s` (steady clock)."""

    def __init__(
        self, period_s: float = DEFAULT_PERIOD_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.period_s = period_s
        self._clock = clock
        self._lock = threading.Lock()  # the executor and the frame worker both log
        self._last: dict[str, float] = {}
        self._held: dict[str, int] = {}

    def admit(self, key: str) -> int | None:
        """None: hold this line back. Otherwise log it: how many lines of `key` were held
        back since its last line."""
        now = self._clock()
        with self._lock:
            last = self._last.get(key)
            if last is not None and now - last < self.period_s:
                self._held[key] = self._held.get(key, 0) + 1
                return None
            self._last[key] = now
            return self._held.pop(key, 0)

    def line(self, key: str, message: str) -> str | None:
        """`message` with the count held back appended, or None while `key` is throttled."""
        held = self.admit(key)
        if held is None:
            return None
        return f"{message} ({held} more held back since the last)" if held else message
