"""Failed-authentication rate limiting per client address, with the ``limits`` library.

Each request that presents a bearer token (or a dashboard login) that does not verify
counts one failure against the client's address. Once an address has ``failures``
failures within the last ``window_s`` seconds (a moving window), every authenticated
request from it answers 429 with ``Retry-After`` (seconds) until the oldest failure leaves
the window, whether its token is right or not: a guesser learns nothing while blocked.
Requests with no token at all are answered 401 and not counted. A correct token from
another address is not affected.

Counters live in this process's memory (``limits.storage.MemoryStorage``): several API
processes each keep their own, so the effective limit is per process. The address is
uvicorn's client address (behind a reverse proxy, run uvicorn with ``--proxy-headers``
and ``--forwarded-allow-ips`` so that it is the real client's).
"""

from __future__ import annotations

import math
import time

from limits import RateLimitItemPerSecond
from limits.storage import MemoryStorage
from limits.strategies import MovingWindowRateLimiter

DEFAULT_FAILURES = 20
DEFAULT_WINDOW_S = 60


class AuthFailureLimiter:
    """Counts failed authentications per address and says when to refuse.

    Args:
        failures: failures allowed per address within the window (> 0).
        window_s: the moving window, seconds (> 0).
    """

    def __init__(self, failures: int = DEFAULT_FAILURES, window_s: int = DEFAULT_WINDOW_S):
        if failures <= 0 or window_s <= 0:
            raise ValueError(
                f"auth rate limit: expected failures > 0 and window_s > 0, "
                f"got {failures} and {window_s}"
            )
        self.failures = int(failures)
        self.window_s = int(window_s)
        self._item = RateLimitItemPerSecond(self.failures, self.window_s, namespace="authfail")
        self._limiter = MovingWindowRateLimiter(MemoryStorage())

    def retry_after(self, address: str) -> int | None:
        """Seconds until ``address`` may try again (>= 1), None when it is not blocked."""
        if self._limiter.test(self._item, address):
            return None
        reset = self._limiter.get_window_stats(self._item, address).reset_time
        return max(1, math.ceil(reset - time.time()))

    def failed(self, address: str) -> None:
        """Count one failed authentication from ``address``."""
        self._limiter.hit(self._item, address)
