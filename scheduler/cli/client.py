"""HTTP client of the pasture API (httpx), with TLS verified against the cluster CA.

httpx is imported when the first client is made, not at import: ``pasture --help`` and
commands that never call the API do not pay for it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from scheduler.cli.config import ClientConfig

if TYPE_CHECKING:
    import ssl

    import httpx


class ApiError(Exception):
    """The API answered 4xx/5xx, or could not be reached (``status`` 0).

    Attributes:
        status: HTTP status, 0 when the connection failed.
        message: the API's ``detail`` as one string.
        errors: for 422, the list of ``{"loc": [...], "msg": ...}`` problems.
    """

    def __init__(self, status: int, message: str, errors: list[dict] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.errors = errors or []


def _error(response: httpx.Response) -> ApiError:
    try:
        body = response.json()
    except ValueError:
        return ApiError(response.status_code, response.text.strip() or response.reason_phrase)
    detail = body.get("detail") if isinstance(body, dict) else body
    if isinstance(detail, list):
        message = body.get("message") or "invalid input"
        return ApiError(response.status_code, message, [d for d in detail if isinstance(d, dict)])
    return ApiError(response.status_code, str(detail))


def _verify(config: ClientConfig) -> ssl.SSLContext | bool:
    """TLS verification for httpx: the cluster CA when given, else the system store. A
    plain ``http://`` endpoint (the dev cluster) never does TLS, so no CA bundle is loaded
    for it (loading one costs ~80 ms of the CLI's start-up)."""
    import ssl

    if config.ca_cert:
        return ssl.create_default_context(cafile=config.ca_cert)
    return not config.endpoint.startswith("http://")


class ApiClient:
    """Calls ``/api/v1`` endpoints; every method returns the decoded JSON.

    Args:
        config: endpoint, token and CA bundle (``verify`` uses it when set, else the
            system store).
        timeout: seconds per request (streams have no read timeout).

    Raises (every method):
        ApiError: non-2xx answer, or the endpoint cannot be reached (status 0).
    """

    def __init__(self, config: ClientConfig, timeout: float = 30.0) -> None:
        import httpx

        self.config = config
        self._http = httpx.Client(
            base_url=config.endpoint,
            headers={"Authorization": f"Bearer {config.token}"},
            verify=_verify(config),
            timeout=timeout,
        )

    def close(self) -> None:
        self._http.close()

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        import httpx

        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise ApiError(0, f"cannot reach {self.config.endpoint}: {exc}") from None
        if response.status_code >= 400:
            raise _error(response)
        if response.headers.get("content-type", "").startswith("application/json"):
            return response.json()
        return response.text

    # -- jobs ---------------------------------------------------------------------------
    def submit(self, body: bytes, json_body: bool = False) -> dict:
        ctype = "application/json" if json_body else "application/yaml"
        return self.request("POST", "/api/v1/jobs", content=body, headers={"content-type": ctype})

    def submit_batch(self, documents: list[dict]) -> dict:
        """``POST /api/v1/jobs:batch``: ``{"items": [...], "created", "failed"}``."""
        return self.request("POST", "/api/v1/jobs:batch", json={"jobs": documents})

    def jobs(self, **params: Any) -> dict:
        params = {k: v for k, v in params.items() if v is not None}
        return self.request("GET", "/api/v1/jobs", params=params)

    def job(self, name: str) -> dict:
        return self.request("GET", f"/api/v1/jobs/{name}")

    def events(self, name: str) -> dict:
        return self.request("GET", f"/api/v1/jobs/{name}/events")

    def stop(self, name: str) -> dict:
        return self.request("POST", f"/api/v1/jobs/{name}/stop")

    def delete(self, name: str, force: bool = False) -> dict:
        return self.request(
            "DELETE", f"/api/v1/jobs/{name}", params={"force": "true" if force else "false"}
        )

    def log_files(self, name: str) -> list[dict]:
        return self.request("GET", f"/api/v1/jobs/{name}/logs/files")

    def logs(self, name: str, role: str | None, index: int | None, offset: int = 0) -> str:
        params = {"role": role, "index": index, "offset": offset}
        params = {k: v for k, v in params.items() if v is not None}
        return self.request("GET", f"/api/v1/jobs/{name}/logs", params=params)

    def log_bytes(self, name: str, role: str, index: int, offset: int = 0) -> bytes:
        """One task's log bytes from ``offset`` (bytes) to the end of what is written."""
        import httpx

        params = {"role": role, "index": index, "offset": offset}
        try:
            response = self._http.get(f"/api/v1/jobs/{name}/logs", params=params)
        except httpx.HTTPError as exc:
            raise ApiError(0, f"cannot reach {self.config.endpoint}: {exc}") from None
        if response.status_code >= 400:
            raise _error(response)
        return response.content

    # -- cluster ------------------------------------------------------------------------
    def nodes(self) -> list[dict]:
        return self.request("GET", "/api/v1/nodes")

    def node(self, name: str) -> dict:
        """One node with its events (``GET /api/v1/nodes/{name}``)."""
        return self.request("GET", f"/api/v1/nodes/{name}")

    def node_action(self, name: str, action: str) -> dict:
        return self.request("POST", f"/api/v1/nodes/{name}/{action}")

    def vcs(self) -> list[dict]:
        return self.request("GET", "/api/v1/vcs")

    def status(self) -> dict:
        return self.request("GET", "/api/v1/status")

    def whoami(self) -> dict:
        return self.request("GET", "/api/v1/whoami")
