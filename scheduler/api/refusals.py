"""Refused clients are held: their next requests answer 429 before anything is read.

Once a request is refused with 429 (a rate limit, too many failed authentications, a
token over its handler-time budget), the API holds what was refused for
``api.refusal_hold_s`` seconds (default 1, at most the refusal's own ``Retry-After``):

- a **credential** (a bearer token or a dashboard session cookie, kept as a SHA-256
  digest), for every route (the request limit, a failing token, the time budget) or for
  the one route (method and path) it was refused on (the submit limit: a token over it
  may still read pages);
- an **address** (too many failed authentications from it): its requests with a
  credential this process has not seen valid recently (``known``); requests without a
  credential (``/healthz``, the login page) are not held, as they are not counted.

A held request is answered by :class:`EarlyRefusal`, an ASGI middleware in front of
everything else: 429 with ``Retry-After`` (the hold's remaining seconds, >= 1), without
reading the body, parsing the form, routing, rendering or a Redis read, after a pause of
:data:`HELD_DELAY_S` (a small tarpit: the answer waits asynchronously, holding no thread;
at most :data:`MAX_DELAYED` answers wait at once, the others are sent at once). So a
client that ignores ``Retry-After`` and goes on sending costs the process one header scan
and one small answer a request, whatever the route it floods, and one that sends a
request after another's answer (most clients do) sends at most 1 / HELD_DELAY_S requests
a second per connection while it is held (issue 32 item 5). The
decision to refuse is the limiters' (:mod:`scheduler.api.ratelimit`,
:mod:`scheduler.api.fairness`); this only makes the repeats cheap, and never refuses
what the limiters would let through for longer than the hold (a credential held for one
route is not held for others). A held answer repeats the refusal's own reason.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import threading
import time
from collections.abc import Callable, Iterable

from starlette.types import ASGIApp, Receive, Scope, Send

from scheduler.api.limits import send_error
from scheduler.settings import DEFAULT_REFUSAL_HOLD_S

MAX_HELD = 65536
"""The most holds kept at once (the oldest are dropped first)."""
HELD_DELAY_S = 0.02
"""Seconds a held answer waits before it is sent (never past the hold's end)."""
MAX_DELAYED = 1024
"""The most held answers waiting at once."""

SESSION_COOKIE = b"pasture_session"
ANY_ROUTE = ""


def digest(secret: str) -> str:
    """The key a credential is held by (SHA-256 hex, its first 32 characters)."""
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def credentials(headers: Iterable[tuple[bytes, bytes]]) -> tuple[str | None, str | None]:
    """``(bearer token, dashboard session id)`` of raw ASGI ``headers``, either None when
    absent (not validated: only looked up)."""
    bearer = sid = None
    for name, value in headers:
        if name == b"authorization":
            scheme, _, rest = value.decode("latin-1").partition(" ")
            if scheme.lower() == "bearer" and rest.strip():
                bearer = rest.strip()
        elif name == b"cookie":
            for part in value.decode("latin-1").split(";"):
                key, _, val = part.strip().partition("=")
                if key.encode("latin-1") == SESSION_COOKIE and val:
                    sid = val
    return bearer, sid


class RefusalHold:
    """Who is held, and until when (module docstring).

    Args:
        hold_s: seconds a refusal is held (0: holds are off; >= 0).
        clock: monotonic seconds (tests pass a fake one).

    Raises:
        ValueError: a negative ``hold_s``.
    """

    def __init__(
        self, hold_s: float = DEFAULT_REFUSAL_HOLD_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if hold_s < 0:
            raise ValueError(f"api.refusal_hold_s: expected >= 0, got {hold_s}")
        self.hold_s = float(hold_s)
        self._clock = clock
        self._until: dict[tuple[str, str], tuple[float, str]] = {}
        self._lock = threading.Lock()  # limiters refuse in worker threads too

    def _put(self, key: tuple[str, str], retry_after: float, what: str) -> None:
        if not self.hold_s:
            return
        with self._lock:
            self._until.pop(key, None)
            while len(self._until) >= MAX_HELD:
                self._until.pop(next(iter(self._until)))
            until = self._clock() + min(self.hold_s, max(0.0, retry_after))
            self._until[key] = (until, what)

    def hold_credential(
        self,
        bearer: str | None,
        sid: str | None,
        retry_after: float,
        what: str,
        route: str = ANY_ROUTE,
    ) -> None:
        """Hold the request's credential (its bearer token, else its session cookie) for
        ``route`` (``"<METHOD> <path>"``; :data:`ANY_ROUTE`: every route); ``what``: why
        it was refused (the held answers say it again)."""
        secret = bearer if bearer is not None else sid
        if secret is not None:
            self._put(("c", f"{digest(secret)} {route}"), retry_after, what)

    def hold_address(self, address: str, retry_after: float, what: str) -> None:
        """Hold ``address`` for credentials not seen valid recently."""
        self._put(("a", address), retry_after, what)

    def _left(self, key: tuple[str, str], now: float) -> tuple[float, str]:
        entry = self._until.get(key)
        if entry is None:
            return 0.0, ""
        if entry[0] <= now:
            with self._lock:
                if self._until.get(key) == entry:
                    del self._until[key]
            return 0.0, ""
        return entry[0] - now, entry[1]

    def held(
        self,
        address: str,
        bearer: str | None,
        sid: str | None,
        route: str,
        known: Callable[[str | None, str | None], bool],
    ) -> tuple[float, str]:
        """``(seconds the request is still held for, why)``; ``(0.0, "")``: not held.
        ``known(bearer, sid)``: whether its credential was seen valid recently (then an
        address hold does not apply to it)."""
        if not self._until:
            return 0.0, ""
        now = self._clock()
        secret = bearer if bearer is not None else sid
        if secret is not None:
            key = digest(secret)
            left = max(
                self._left(("c", f"{key} {ANY_ROUTE}"), now),
                self._left(("c", f"{key} {route}"), now),
            )
            if left[0]:
                return left
            left = self._left(("a", address), now)
            if left[0] and not known(bearer, sid):
                return left
        return 0.0, ""

    def __len__(self) -> int:
        """Holds kept now (expired ones included until looked up)."""
        return len(self._until)


class EarlyRefusal:
    """ASGI middleware: a held request answers 429 at once (module docstring).

    Args:
        app: the application behind it.
        hold: the holds.
        known: ``known(bearer, sid)``: the credential was seen valid recently.
        refused: called with the request's method for each request refused here (a
            metrics counter), or None.
    """

    def __init__(
        self,
        app: ASGIApp,
        hold: RefusalHold,
        known: Callable[[str | None, str | None], bool],
        refused: Callable[[str], None] | None = None,
    ) -> None:
        self.app = app
        self.hold = hold
        self.known = known
        self.refused = refused
        self._delayed = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not len(self.hold):
            await self.app(scope, receive, send)
            return
        bearer, sid = credentials(scope.get("headers", ()))
        client = scope.get("client")
        address = client[0] if client else "unknown"
        route = route_of(scope["method"], scope["path"])
        left, what = self.hold.held(address, bearer, sid, route, self.known)
        if not left:
            await self.app(scope, receive, send)
            return
        if self.refused is not None:
            self.refused(scope["method"])
        if self._delayed < MAX_DELAYED:
            self._delayed += 1
            try:
                await asyncio.sleep(min(left, HELD_DELAY_S))
            finally:
                self._delayed -= 1
        wait = max(1, math.ceil(left))
        retry = [(b"retry-after", str(wait).encode())]
        await send_error(send, 429, f"{what}; retry in {wait} s", retry)


def route_of(method: str, path: str) -> str:
    """The route key of a request for :meth:`RefusalHold.hold_credential`."""
    return f"{method} {path}"
