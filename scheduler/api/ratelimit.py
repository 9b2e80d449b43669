"""Rate limits of the API, with the ``limits`` library (moving windows, in memory).

Three limits, each answering 429 with ``Retry-After`` (seconds) when exceeded:

- **Failed authentications, per address and presented token.** A bearer token (or a
  dashboard login, or a node-credential exchange) that does not verify counts one failure
  against the pair (client address, SHA-256 of the presented token). Once that pair has
  ``auth_failures_per_window`` failures within ``auth_failure_window_s`` seconds, the same
  token from the same address answers 429 without being looked up, until the oldest
  failure leaves the window. Any *other* token from that address (a colleague behind the
  same NAT, the admin) is verified as usual: one client's wrong token never locks out
  anybody else. A client spraying distinct wrong tokens gets 401 for each (tokens are 256
  random bits, so guessing is hopeless; each costs one Redis read, like any request, and
  its requests are still bounded by the server's concurrency). Requests with no token at
  all answer 401 and are not counted.
- **Failed authentications, per address** (``auth_failures_per_address`` within the same
  window, default 200): every failure above also counts against its address alone (as
  does a dashboard request with an unknown session cookie). Past it, a token from that
  address that this process has not verified within ``api.token_cache_s`` answers 429
  without being looked up: a spray of distinct wrong tokens (or session cookies) costs a
  429 and no Redis read, while a token in use (verified recently) goes on working. The
  default is far above what people behind one NAT mistype.
- **Requests per token** (``api.request_limit``, default ``1000 per 10 seconds``): every
  authenticated API request counts against its token (by name), whatever the address.
- **Submits per token** (``api.submit_limit``, default ``200 per 10 seconds``, lower): a
  submit, batch submit or dry-run request also counts against the token's submit limit
  (a batch is one request; its size is bounded by the batch route's own limit).

Limits are strings in the ``limits`` notation (``"N per M seconds"``, several separated by
``;``); an empty string turns one off. Counters live in this process's memory
(``limits.storage.MemoryStorage``): several API processes each keep their own, so the
effective limit is per process. The address is uvicorn's client address (behind a reverse
proxy, run uvicorn with ``--proxy-headers`` and ``--forwarded-allow-ips`` so that it is the
real client's).
"""

from __future__ import annotations

import hashlib
import math
import time

from limits import RateLimitItem, RateLimitItemPerSecond
from limits.storage import MemoryStorage
from limits.strategies import MovingWindowRateLimiter

from scheduler.settings import (
    DEFAULT_AUTH_FAILURE_WINDOW_S,
    DEFAULT_AUTH_FAILURES,
    DEFAULT_AUTH_FAILURES_PER_ADDRESS,
    ApiSettings,
    parse_limit,
)


def _wait(limiter: MovingWindowRateLimiter, item: RateLimitItem, *keys: str) -> int:
    reset = limiter.get_window_stats(item, *keys).reset_time
    return max(1, math.ceil(reset - time.time()))


class AuthFailureLimiter:
    """Counts failed authentications per (address, presented token) and says when to
    refuse that pair (module docstring).

    Args:
        failures: failures allowed per address and token within the window (> 0).
        window_s: the moving window, seconds (> 0).
        per_address: failures allowed per address (any tokens) within the window (> 0).

    Raises:
        ValueError: a limit <= 0.
    """

    def __init__(
        self,
        failures: int = DEFAULT_AUTH_FAILURES,
        window_s: int = DEFAULT_AUTH_FAILURE_WINDOW_S,
        per_address: int = DEFAULT_AUTH_FAILURES_PER_ADDRESS,
    ):
        if failures <= 0 or window_s <= 0 or per_address <= 0:
            raise ValueError(
                f"auth rate limit: expected failures > 0, window_s > 0 and per_address > 0, "
                f"got {failures}, {window_s} and {per_address}"
            )
        self.failures = int(failures)
        self.window_s = int(window_s)
        self.per_address = int(per_address)
        self._item = RateLimitItemPerSecond(self.failures, self.window_s, namespace="authfail")
        self._address_item = RateLimitItemPerSecond(
            self.per_address, self.window_s, namespace="authfail-address"
        )
        self._limiter = MovingWindowRateLimiter(MemoryStorage())

    @staticmethod
    def _key(token: str) -> str:
        # a digest, so that no secret (not even a wrong one) is kept in memory
        return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()[:32]

    def retry_after(self, address: str, token: str) -> int | None:
        """Seconds until ``token`` may be tried again from ``address`` (>= 1); None when
        the pair is not blocked."""
        key = self._key(token)
        if self._limiter.test(self._item, address, key):
            return None
        return _wait(self._limiter, self._item, address, key)

    def address_retry_after(self, address: str) -> int | None:
        """Seconds (>= 1) until ``address`` may present an unverified token again; None
        when the address is under its failure limit."""
        if self._limiter.test(self._address_item, address):
            return None
        return _wait(self._limiter, self._address_item, address)

    def failed(self, address: str, token: str) -> None:
        """Count one failed authentication of ``token`` from ``address`` (against the
        pair and against the address)."""
        self._limiter.hit(self._item, address, self._key(token))
        self._limiter.hit(self._address_item, address)

    def failed_address(self, address: str) -> None:
        """Count one failure against ``address`` alone (an unknown dashboard session)."""
        self._limiter.hit(self._address_item, address)


class TokenRateLimiter:
    """Requests and submits per token (module docstring).

    Args:
        requests: the request limits (:func:`scheduler.settings.parse_limit`); [] for none.
        submits: the submit limits; [] for none.
    """

    def __init__(self, requests: list[RateLimitItem], submits: list[RateLimitItem]) -> None:
        self.requests = requests
        self.submits = submits
        self._limiter = MovingWindowRateLimiter(MemoryStorage())

    @classmethod
    def from_settings(cls, api_settings: ApiSettings) -> TokenRateLimiter:
        """From ``api.request_limit`` / ``api.submit_limit``."""
        return cls(
            parse_limit(api_settings.request_limit, "api.request_limit"),
            parse_limit(api_settings.submit_limit, "api.submit_limit"),
        )

    def _hit(self, items: list[RateLimitItem], kind: str, token: str, cost: int) -> int | None:
        for item in items:
            if not self._limiter.hit(item, kind, token, cost=max(1, cost)):
                return _wait(self._limiter, item, kind, token)
        return None

    def request(self, token: str) -> int | None:
        """Count one request of the token named ``token``; seconds to wait (>= 1) when it
        is over its request limit (the request is then refused), else None."""
        return self._hit(self.requests, "request", token, 1)

    def submit(self, token: str) -> int | None:
        """Count one submit request of ``token``; seconds to wait (>= 1) when it is over
        its submit limit (then nothing is submitted), else None."""
        return self._hit(self.submits, "submit", token, 1)
