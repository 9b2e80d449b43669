"""One HTTP request to the pasture API with the standard library (``urllib.request``).

A one-shot command (``job list``, ``node show``, a <TAB>, ``job exec``'s access request)
makes one or two requests and exits: httpx and httpcore would cost more to import
(~50 ms of CPU) than the requests take. :func:`send` is what those use; httpx stays
where a connection is kept for many requests (``job logs``, see
:class:`scheduler.cli.client.ApiClient`).

What stays as httpx did it: the endpoint joined with the path and its query (a ``?`` in
the path starts the query, a ``#`` ends the URL, other characters percent-encoded), the
bearer token, TLS trust (:func:`tls_context`: the cluster CA when configured, else
``SSL_CERT_FILE``/``SSL_CERT_DIR``, else certifi's bundle; plain ``http://`` never loads
one), ``HTTP(S)_PROXY``/``NO_PROXY``, no redirects followed, the timeout, and the errors
(:class:`ApiError`: the API's status and ``detail``, status 0 "cannot reach ENDPOINT:
REASON" when no answer came).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import ssl
    import urllib.request
    from email.message import Message

    from scheduler.cli.config import ClientConfig


class ApiError(Exception):
    """The API answered 4xx/5xx, or could not be reached (``status`` 0).

    Attributes:
        status: HTTP status, 0 when the connection failed.
        message: the API's ``detail`` as one string.
        errors: for 422, the list of ``{"loc": [...], "msg": ...}`` problems.
    """

    def __init__(
        self, status: int, message: str, errors: list[dict[str, Any]] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.errors = errors or []


def api_error(status: int, text: str, reason: str) -> ApiError:
    """The :class:`ApiError` of a 4xx/5xx answer: its JSON ``detail`` (a message, or
    FastAPI's list of field errors with the API's ``message``), else its text, else the
    status line's ``reason``."""
    import json

    try:
        body = json.loads(text)
    except ValueError:
        return ApiError(status, text.strip() or reason)
    detail = body.get("detail") if isinstance(body, dict) else body
    if isinstance(detail, list):
        message = body.get("message") if isinstance(body, dict) else None
        return ApiError(
            status, message or "invalid input", [d for d in detail if isinstance(d, dict)]
        )
    return ApiError(status, str(detail))


def tls_context(config: ClientConfig) -> ssl.SSLContext | None:
    """The TLS trust of ``config.endpoint`` as httpx builds it: None for ``http://``;
    the cluster CA (``config.ca_cert``) when set; else ``SSL_CERT_FILE``, else
    ``SSL_CERT_DIR``, else certifi's bundle (the system store without certifi)."""
    import os
    import ssl

    if not config.endpoint.startswith("https://"):
        return None
    if config.ca_cert:
        return ssl.create_default_context(cafile=config.ca_cert)
    if os.environ.get("SSL_CERT_FILE"):
        return ssl.create_default_context(cafile=os.environ["SSL_CERT_FILE"])
    if os.environ.get("SSL_CERT_DIR"):
        return ssl.create_default_context(capath=os.environ["SSL_CERT_DIR"])
    try:
        import certifi
    except ImportError:
        return ssl.create_default_context()
    return ssl.create_default_context(cafile=certifi.where())


# httpx's (WHATWG's) characters left as they are in a query and in a path; every other
# one is percent-encoded (UTF-8), and an escape already made (%XX) is kept
_QUERY_SAFE = "".join(chr(i) for i in range(0x21, 0x7F) if chr(i) not in '"#<>')
_PATH_SAFE = "".join(c for c in _QUERY_SAFE if c not in "?`{}")
_ESCAPE = re.compile(r"%[A-Fa-f0-9]{2}")


def _quote(text: str, safe: str) -> str:
    from urllib.parse import quote

    pieces = _ESCAPE.split(text)
    escapes = [*_ESCAPE.findall(text), ""]
    return "".join(quote(p, safe=safe) + e for p, e in zip(pieces, escapes, strict=True))


def url(endpoint: str, path: str, params: dict[str, Any] | None = None) -> str:
    """``endpoint`` + ``path`` (its query after the first ``?``, nothing after a ``#``)
    or ``params`` instead of that query when given (str, int, float; True/False as
    ``true``/``false``, None as empty, a list as the key repeated), percent-encoded as
    httpx encodes them. Unlike httpx, ``.`` and ``..`` segments are sent as they are
    (the API answers "not found" for such a name, not for another path)."""
    from urllib.parse import urlencode

    path, _, query = path.split("#", 1)[0].partition("?")
    if params is not None:  # as httpx: they replace the path's query, even when empty
        query = urlencode(
            [
                (key, _text(v))
                for key, value in params.items()
                for v in (value if isinstance(value, (list, tuple)) else [value])
            ]
        )
    base = endpoint.rstrip("/") + _quote(path, _PATH_SAFE)
    return f"{base}?{_quote(query, _QUERY_SAFE)}" if query else base


def _text(value: Any) -> str:
    """A query value as httpx writes it."""
    if value is True:
        return "true"
    if value is False:
        return "false"
    return "" if value is None else str(value)


class _NoRedirect:
    """Redirects are answers (httpx follows none), not requests made on the user's
    token to another place."""

    def redirect_request(self, *args: Any) -> None:
        return None


def send(
    config: ClientConfig,
    method: str,
    path: str,
    *,
    params: dict[str, Any] | None = None,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
    timeout: float = 30.0,
) -> tuple[int, Message, bytes]:
    """One request to ``config.endpoint`` + ``path`` with the bearer token.

    Args:
        body: the request's content (its type in ``headers``).
        timeout: seconds to connect and for each read.

    Returns:
        (status below 400, the answer's headers, its content).

    Raises:
        ApiError: the API answered 4xx/5xx (:func:`api_error`), or status 0 "cannot
            reach ENDPOINT: REASON" (refused, unknown host, TLS, timeout, a broken answer).
    """
    import http.client
    import urllib.error
    import urllib.request

    request = urllib.request.Request(
        url(config.endpoint, path, params),
        data=body if body is not None else (b"" if method in ("POST", "PUT", "PATCH") else None),
        method=method,
        headers={"Authorization": f"Bearer {config.token}", **(headers or {})},
    )
    try:
        with _opener(config).open(request, timeout=timeout) as answer:
            return answer.status, answer.headers, answer.read()
    except urllib.error.HTTPError as exc:
        with exc:
            content = exc.read()
        if exc.code < 400:  # a redirect, not followed: an answer as any other
            return exc.code, exc.headers, content
        raise api_error(exc.code, content.decode("utf-8", "replace"), str(exc.reason)) from None
    except urllib.error.URLError as exc:
        raise ApiError(0, f"cannot reach {config.endpoint}: {exc.reason}") from None
    except (OSError, http.client.HTTPException, ValueError) as exc:
        raise ApiError(0, f"cannot reach {config.endpoint}: {exc}") from None


def _opener(config: ClientConfig) -> urllib.request.OpenerDirector:
    """urllib's opener with the proxies of the environment, ``config``'s TLS trust and
    no redirects."""
    import urllib.request

    class NoRedirect(_NoRedirect, urllib.request.HTTPRedirectHandler):
        pass

    return urllib.request.build_opener(
        urllib.request.HTTPSHandler(context=tls_context(config)), NoRedirect()
    )


def decode(headers: Message, content: bytes) -> Any:
    """An answer's content: the decoded JSON when its type is ``application/json``, else
    its text (the charset it names, else UTF-8; undecodable bytes replaced)."""
    import json

    if (headers.get("content-type") or "").startswith("application/json"):
        return json.loads(content)
    return content.decode(headers.get_content_charset() or "utf-8", "replace")
