"""Fair sharing of one API process between tokens: at most ``per_token`` requests of one
token are handled at a time; its other requests wait, asynchronously (holding no worker
thread), in arrival order.

Why: the rate limits (:mod:`scheduler.api.ratelimit`) bound how *many* requests a token
sends, not how much of the process it takes at once. A tenant loading dashboard pages
from many clients, well under its request limit, kept every worker thread and the
interpreter busy, and another tenant's median request time rose 58x (issue 32 item 5).
With one page of a token rendered at a time, another tenant's request shares the
interpreter with at most one of the flood's, whatever the number of flooding clients
(the per-flow fair queueing idea of Nagle, RFC 970, with one queue per token).

Only the handler's own work is gated: the gate is a ``scope="function"`` dependency, so a
streamed body (a log download) is sent after the gate was given back.

A gate bounds how many of a token's requests run at once, not how much of the process's
time they take one after another: one session loading expensive pages back to back
holds its slot all the time. :class:`TimeBudget` bounds that too: the seconds a token's
requests held their slot (wall-clock, from the slot's grant to the handler's end) are
counted in a leaky bucket per token (``api.token_time_limit``, default ``3 per 10
seconds``: 3 s of handler time, draining at 0.3 s a second); a token whose bucket is
over answers 429 with ``Retry-After`` (the seconds until it is back under) before its
request is handled, and is held (:mod:`scheduler.api.refusals`). Wall-clock rather than
CPU time: the handlers run in a shared thread pool, where a request's own CPU time cannot
be told from its neighbours'; on a busy machine a slow page costs its token more, never
another token.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from limits import RateLimitItem

from scheduler.settings import DEFAULT_TOKEN_CONCURRENCY

MAX_TOKENS = 65536
"""The most tokens a :class:`TimeBudget` keeps (the oldest are dropped first)."""


class TokenGate:
    """Per-token concurrency limit (module docstring).

    Args:
        per_token: requests of one token handled at once (>= 1).

    Raises:
        ValueError: ``per_token`` < 1.
    """

    def __init__(self, per_token: int = DEFAULT_TOKEN_CONCURRENCY) -> None:
        if per_token < 1:
            raise ValueError(f"per_token: expected at least 1, got {per_token}")
        self.per_token = per_token
        self._gates: dict[str, tuple[asyncio.Semaphore, list[int]]] = {}

    @asynccontextmanager
    async def hold(self, token: str) -> AsyncIterator[None]:
        """Wait for one of ``token``'s slots, hold it for the block, then give it back
        (the token's entry is dropped when nobody holds or waits for it)."""
        gate = self._gates.get(token)
        if gate is None:
            gate = self._gates[token] = (asyncio.Semaphore(self.per_token), [0])
        sem, users = gate
        users[0] += 1
        try:
            async with sem:
                yield
        finally:
            users[0] -= 1
            if users[0] == 0:
                self._gates.pop(token, None)

    def __len__(self) -> int:
        """Tokens holding or waiting for a slot now."""
        return len(self._gates)


class TimeBudget:
    """Handler seconds per token, as leaky buckets (module docstring).

    Args:
        limits: budgets from :func:`scheduler.settings.parse_limit`: each
            ``N per M seconds`` allows ``N`` seconds of handler time that drain at
            ``N / M`` seconds a second; [] for none.
        clock: monotonic seconds (tests pass a fake one).
    """

    def __init__(
        self, limits: list[RateLimitItem], clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.buckets = [(float(i.amount), float(i.amount) / i.get_expiry()) for i in limits]
        self._clock = clock
        self._used: dict[str, list[tuple[float, float]]] = {}

    def _levels(self, token: str, now: float) -> list[tuple[float, float]]:
        levels = self._used.get(token)
        if levels is None:
            return [(0.0, now)] * len(self.buckets)
        return [
            (max(0.0, used - rate * (now - at)), now)
            for (used, at), (_, rate) in zip(levels, self.buckets, strict=True)
        ]

    def retry_after(self, token: str) -> int | None:
        """Seconds (>= 1) until ``token`` is back within its budgets; None when it is."""
        if not self.buckets or token not in self._used:
            return None
        now = self._clock()
        waits = [
            (used - amount) / rate
            for (used, _), (amount, rate) in zip(
                self._levels(token, now), self.buckets, strict=True
            )
            if used > amount
        ]
        return max(1, math.ceil(max(waits))) if waits else None

    def charge(self, token: str, seconds: float) -> None:
        """Count ``seconds`` of handler time of ``token``."""
        if not self.buckets:
            return
        now = self._clock()
        levels = [(used + seconds, at) for used, at in self._levels(token, now)]
        self._used.pop(token, None)
        while len(self._used) >= MAX_TOKENS:
            self._used.pop(next(iter(self._used)))
        self._used[token] = levels
