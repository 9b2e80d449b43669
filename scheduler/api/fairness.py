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
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

DEFAULT_PER_TOKEN = 1


class TokenGate:
    """Per-token concurrency limit (module docstring).

    Args:
        per_token: requests of one token handled at once (>= 1).

    Raises:
        ValueError: ``per_token`` < 1.
    """

    def __init__(self, per_token: int = DEFAULT_PER_TOKEN) -> None:
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
