"""Messages refused for their size, logged as ``message_too_large`` once per endpoint,
then at most every ``LOG_EVERY_S`` with the count refused in between: a client that
sends too much in a loop does not flood the log (as ``forbidden`` does not)."""

from __future__ import annotations

import time
from collections.abc import Callable

from pzq.logs import get_logger

log = get_logger("pzq.limits")

LOG_EVERY_S = 10.0
LIMIT_WORDS = " the limit of "  # in every refusal of a size: the one look that tells them


def over_a_limit(reason: str) -> bool:
    """Whether a refusal's reason is a size's (``... exceeds the limit of N bytes``)."""
    return LIMIT_WORDS in reason


class TooLargeLog:
    """The size refusals of one endpoint (``receive``, ``monitor``)."""

    def __init__(self, endpoint: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.endpoint = endpoint
        self.clock = clock
        self._logged_at: float | None = None
        self._unlogged = 0

    def refused(self, reason: str) -> None:
        now = self.clock()
        if self._logged_at is not None and now - self._logged_at < LOG_EVERY_S:
            self._unlogged += 1
            return
        log.warning("message_too_large", endpoint=self.endpoint, reason=reason,
                    refused_since_last_logged=self._unlogged)
        self._logged_at, self._unlogged = now, 0
