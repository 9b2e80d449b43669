"""ASGI middleware that rejects request bodies larger than a limit with 413.

Checks the Content-Length header first (no body is read), and counts streamed bytes for
chunked uploads, so a client cannot make the server buffer more than ``max_body_bytes``.
"""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send


async def send_error(
    send: Send, status: int, detail: str, headers: list[tuple[bytes, bytes]]
) -> None:
    """Answer ``status`` with the API's error body ``{"detail": detail}`` (JSON) straight
    from an ASGI middleware, before routing; ``headers``: more raw headers (after the
    content type and length)."""
    body = json.dumps({"detail": detail}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class BodyTooLargeError(Exception):
    """Raised inside receive() when a streamed body passes the limit."""


class BodySizeLimit:
    """Answer 413 for bodies over ``max_body_bytes`` (bytes)."""

    def __init__(self, app: ASGIApp, max_body_bytes: int) -> None:
        self.app = app
        self.max = max_body_bytes

    async def _reject(self, send: Send) -> None:
        detail = f"request body too large: the limit is {self.max} bytes"
        await send_error(send, 413, detail, [(b"connection", b"close")])

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    length = int(value)
                except ValueError:
                    length = 0
                if length > self.max:
                    await self._reject(send)
                    return
        received = 0
        started = False

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max:
                    raise BodyTooLargeError
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except BodyTooLargeError:
            if not started:
                await self._reject(send)
