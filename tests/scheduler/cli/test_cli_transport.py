"""The standard-library transport of one-shot commands (scheduler/cli/transport.py)
sends what httpx sent and reads the answers and failures as the client did over httpx."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.cli import transport
from scheduler.cli.client import ApiClient, ApiError
from scheduler.cli.config import ClientConfig

ENDPOINT = "http://api.example:8080"


def _httpx_url(path: str, params: dict[str, Any] | None) -> str:
    return str(httpx.Client(base_url=ENDPOINT).build_request("GET", path, params=params).url)


# control characters: httpx refused the URL (InvalidURL); see the next test
NAMES = st.text(
    st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), min_size=1, max_size=20
)


@settings(max_examples=300, deadline=None)
@given(
    name=NAMES,
    query=st.one_of(st.none(), st.just("force=true"), NAMES),
    params=st.one_of(
        st.none(),
        st.dictionaries(
            st.sampled_from(["vc", "state", "limit", "user", "force", "uid"]),
            st.one_of(NAMES, st.integers(0, 10**6), st.booleans(), st.lists(NAMES, max_size=2)),
            max_size=3,
        ),
    ),
)
def test_urls_are_the_ones_httpx_built(name, query, params):
    """A job or node name a user typed (spaces, ``%``, ``?``, ``#``, any script) lands
    in the same URL, so it names the same thing as before."""
    if name.strip(".") == "" or "/." in f"/{name}":
        name = f"x{name}"  # dot segments: httpx dropped them (see transport.url)
    path = f"/api/v1/jobs/{name}" + (f"?{query}" if query is not None else "")
    ours = transport.url(ENDPOINT, path, params)
    assert _sent(ours) == _sent(_httpx_url(path, params)), (path, params)


def _sent(url: str) -> tuple[bytes, bytes, bytes]:
    """What goes to the server: host, path and query as bytes (an empty query is none)."""
    parsed = httpx.URL(url)
    return parsed.raw_host, parsed.raw_path.partition(b"?")[0], parsed.query


def test_control_characters_are_escaped_not_sent():
    assert transport.url(ENDPOINT, "/api/v1/jobs/a\x1fb\r\n") == (
        f"{ENDPOINT}/api/v1/jobs/a%1Fb%0D%0A"
    )


class _Handler(http.server.BaseHTTPRequestHandler):
    answers: dict[str, tuple[int, dict[str, str], bytes]] = {}
    seen: list[tuple[str, str, dict[str, str], bytes]] = []

    def _answer(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        self.seen.append((self.command, self.path, dict(self.headers), self.rfile.read(length)))
        status, headers, body = self.answers[self.path.split("?")[0]]
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_DELETE = _answer

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture()
def server() -> Iterator[str]:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    _Handler.answers, _Handler.seen = {}, []
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


JSON = {"content-type": "application/json"}


def test_answers_and_errors_read_as_over_httpx(server):
    _Handler.answers = {
        "/ok": (200, JSON, b'{"a": [1, "\xc3\xa9"]}'),
        "/text": (200, {"content-type": "text/plain; charset=latin-1"}, b"caf\xe9"),
        "/missing": (404, JSON, b'{"detail": "job \'x\' not found"}'),
        "/invalid": (422, JSON, b'{"detail": [{"loc": ["body", "name"], "msg": "bad"}, 3]}'),
        "/busy": (429, {}, b"  slow down \n"),
        "/bare": (503, {}, b""),
        "/moved": (302, {"location": "/ok", **JSON}, b'{"moved": true}'),
    }
    client = ApiClient(ClientConfig(server, "tok"))
    assert client.request("GET", "/ok") == {"a": [1, "é"]}
    assert client.request("GET", "/text") == "café"
    assert client.request("GET", "/moved") == {"moved": True}  # not followed, as httpx
    assert [s[1] for s in _Handler.seen] == ["/ok", "/text", "/moved"]
    outcomes = []
    for path in ("/missing", "/invalid", "/busy", "/bare"):
        with pytest.raises(ApiError) as caught:
            client.request("GET", path)
        outcomes.append((caught.value.status, caught.value.message, caught.value.errors))
    assert outcomes == [
        (404, "job 'x' not found", []),
        (422, "invalid input", [{"loc": ["body", "name"], "msg": "bad"}]),
        (429, "slow down", []),
        (503, "Service Unavailable", []),
    ]


def test_requests_carry_the_token_body_and_types(server):
    _Handler.answers = {"/api/v1/jobs:batch": (200, JSON, b"{}"), "/y": (201, JSON, b"[]")}
    client = ApiClient(ClientConfig(server, "tok"))
    client.request("POST", "/api/v1/jobs:batch", json={"jobs": [{"name": "é"}]})
    client.request("POST", "/y", content=b"name: x\n", headers={"content-type": "application/yaml"})
    client.request("DELETE", "/y", params={"force": True, "limit": 3})
    (m1, _, h1, b1), (m2, _, h2, b2), (m3, p3, h3, _) = _Handler.seen
    assert (m1, h1["Authorization"], h1["Content-Type"]) == (
        "POST",
        "Bearer tok",
        "application/json",
    )
    assert json.loads(b1) == {"jobs": [{"name": "é"}]}
    assert (m2, h2["Content-Type"], b2) == ("POST", "application/yaml", b"name: x\n")
    assert (m3, p3) == ("DELETE", "/y?force=true&limit=3")


def test_an_unreachable_api_is_status_0_in_httpxs_words():
    config = ClientConfig("http://127.0.0.1:9", "tok")
    with pytest.raises(ApiError) as ours:
        ApiClient(config).request("GET", "/api/v1/jobs")
    with pytest.raises(httpx.HTTPError) as theirs:
        httpx.get("http://127.0.0.1:9/api/v1/jobs")
    assert ours.value.status == 0
    assert ours.value.message == f"cannot reach http://127.0.0.1:9: {theirs.value}"


def test_tls_trust_is_httpxs(monkeypatch, tmp_path):
    assert transport.tls_context(ClientConfig("http://h:1", "t", ca_cert="/nope")) is None
    with pytest.raises(FileNotFoundError):  # the configured CA is what is loaded
        transport.tls_context(ClientConfig("https://h:1", "t", ca_cert=str(tmp_path / "no")))
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "none.pem"))
    with pytest.raises(FileNotFoundError):  # as httpx honours SSL_CERT_FILE
        transport.tls_context(ClientConfig("https://h:1", "t"))
    monkeypatch.delenv("SSL_CERT_FILE")
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    context = transport.tls_context(ClientConfig("https://h:1", "t"))
    assert context is not None and context.check_hostname and context.verify_mode == 2
