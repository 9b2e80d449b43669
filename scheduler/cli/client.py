"""Typed HTTP client of the pasture API, with TLS verified against the cluster CA.

Every answer is parsed with the API's own response models (:mod:`scheduler.api.schemas`,
the ones OpenAPI documents), so the CLI reads attributes, never guessed keys: a field the
API renames or drops fails here (an :class:`ApiError` naming the field) and in the tests,
instead of printing blanks.

Requests go through :func:`scheduler.cli.transport.send` (the standard library's HTTP
client, one connection a request); the log reads of ``job logs`` (many requests on one
kept connection, ``-f``) through httpx, imported and connected at the first of them. The
schemas (pydantic) are imported when the first client is made, not at import:
``pasture --help`` and commands that never call the API do not pay for them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

from scheduler.cli import transport
from scheduler.cli.config import ClientConfig
from scheduler.cli.transport import ApiError, api_error

__all__ = ["ApiClient", "ApiError", "parse", "parse_list"]

if TYPE_CHECKING:
    import ssl

    import httpx
    from pydantic import BaseModel

    from scheduler.api.schemas import (
        BatchOut,
        DryRunOut,
        ExecAccessOut,
        ForgottenNodeOut,
        JobDeleteOut,
        JobEventsOut,
        JobOut,
        JobPage,
        JobSubmitOut,
        LogFileOut,
        NodeEventsOut,
        NodeOut,
        StatusOut,
        VcOut,
        WhoAmI,
    )

    M = TypeVar("M", bound=BaseModel)


def _error(response: httpx.Response) -> ApiError:
    return api_error(response.status_code, response.text, response.reason_phrase)


def parse(model: type[M], data: Any, what: str) -> M:
    """``data`` (decoded JSON) as ``model``.

    Raises:
        ApiError (status 0): the answer does not match the model; the message names the
            request and each field that is missing or of the wrong type.
    """
    from pydantic import ValidationError

    try:
        return model.model_validate(data)
    except ValidationError as exc:
        fields = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or '(answer)'}: {e['msg']}" for e in exc.errors()
        )
        raise ApiError(0, f"unexpected answer to {what} ({model.__name__}): {fields}") from None


def parse_list(model: type[M], data: Any, what: str) -> list[M]:
    """A JSON list of ``model`` objects (see :func:`parse`)."""
    if not isinstance(data, list):
        raise ApiError(0, f"unexpected answer to {what}: expected a list of {model.__name__}")
    return [parse(model, item, what) for item in data]


def _skip_httpx_command_line() -> None:
    """Keep ``import httpx`` from loading its own command-line tool (``httpx._main``:
    click, pygments, rich.progress and rich.syntax, ~0.1 s of CPU at each CLI start).

    httpx imports it in a ``try: ... except ImportError`` and defines a stand-in
    ``httpx.main`` without it; a ``None`` entry in ``sys.modules`` makes that import raise
    ImportError (the import system's documented meaning of None). Nothing else is
    touched, and nothing happens when httpx is already imported."""
    import sys

    if "httpx" not in sys.modules:
        sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]


def _import_schemas_without_plugins() -> None:
    """Import the API's response models (:mod:`scheduler.api.schemas`) with pydantic's
    plugins off while they are built.

    Pydantic looks its plugins up when it builds the first model of a process, in the
    entry points of every installed distribution (``importlib.metadata``: ~30 ms of each
    command's start-up in this project's venv); the CLI only parses answers with these
    models. ``PYDANTIC_DISABLE_PLUGINS`` is pydantic's documented switch
    (https://docs.pydantic.dev/latest/concepts/plugins/); it is set only while the
    module is imported and then restored, as Typer does for its parameter adapters, so
    the processes the CLI starts (a dev cluster, an agent's tasks) and a process that
    imported the models before keep their plugins."""
    import os
    import sys

    if "scheduler.api.schemas" in sys.modules:
        return
    previous = os.environ.get("PYDANTIC_DISABLE_PLUGINS")
    os.environ["PYDANTIC_DISABLE_PLUGINS"] = "1"
    try:
        import scheduler.api.schemas  # noqa: F401 - built here, used by every method
    finally:
        if previous is None:
            del os.environ["PYDANTIC_DISABLE_PLUGINS"]
        else:
            os.environ["PYDANTIC_DISABLE_PLUGINS"] = previous


def _verify(config: ClientConfig) -> ssl.SSLContext | bool:
    """TLS verification for httpx: :func:`scheduler.cli.transport.tls_context`'s (one
    trust for both paths). A plain ``http://`` endpoint (the dev cluster) never does TLS,
    so no CA bundle is loaded for it (loading one costs ~80 ms of the CLI's start-up)."""
    return transport.tls_context(config) or False


class ApiClient:
    """Calls ``/api/v1`` endpoints; every method returns the answer parsed with its
    response model (:mod:`scheduler.api.schemas`).

    Args:
        config: endpoint, token and CA bundle (``verify`` uses it when set, else the
            system store).
        timeout: seconds per request (streams have no read timeout).

    Raises (every method):
        ApiError: non-2xx answer, the endpoint cannot be reached, or the answer does not
            match its model (status 0 for the last two).
    """

    def __init__(self, config: ClientConfig, timeout: float = 30.0) -> None:
        _import_schemas_without_plugins()
        self.config = config
        self.timeout = timeout
        self._kept: httpx.Client | None = None

    @property
    def _http(self) -> httpx.Client:
        """The kept httpx connection of the log reads, made at the first."""
        if self._kept is None:
            _skip_httpx_command_line()
            import httpx

            self._kept = httpx.Client(
                base_url=self.config.endpoint,
                headers={"Authorization": f"Bearer {self.config.token}"},
                verify=_verify(self.config),
                timeout=self.timeout,
            )
        return self._kept

    def close(self) -> None:
        if self._kept is not None:
            self._kept.close()

    def request(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, Any] | None = None,
        content: bytes | None = None,
        json: Any = None,
        headers: dict[str, str] | None = None,
    ) -> Any:
        """``method`` ``path`` (with ``params``; a body as ``content`` bytes or ``json``):
        the decoded JSON answer, or its text when it is not JSON.

        Raises:
            ApiError: 4xx/5xx, or status 0 when the API cannot be reached.
        """
        if json is not None:
            import json as json_module

            text = json_module.dumps(
                json, ensure_ascii=False, separators=(",", ":"), allow_nan=False
            )
            content = text.encode()
            headers = {"content-type": "application/json", **(headers or {})}
        _, answer_headers, body = transport.send(
            self.config,
            method,
            path,
            params=params,
            body=content,
            headers=headers,
            timeout=self.timeout,
        )
        return transport.decode(answer_headers, body)

    # -- jobs ---------------------------------------------------------------------------
    def _spec(self, path: str, body: bytes, json_body: bool) -> Any:
        ctype = "application/json" if json_body else "application/yaml"
        return self.request("POST", path, content=body, headers={"content-type": ctype})

    def submit(self, body: bytes, json_body: bool = False) -> JobSubmitOut:
        """``POST /jobs``: the stored job with ``warnings`` (and ``jobs``, a MARO schedule)."""
        from scheduler.api.schemas import JobSubmitOut

        return parse(JobSubmitOut, self._spec("/api/v1/jobs", body, json_body), "submit")

    def dry_run(self, body: bytes, json_body: bool = False) -> DryRunOut:
        """``POST /jobs:dry-run``: the submit's checks and where it would be placed now."""
        from scheduler.api.schemas import DryRunOut

        data = self._spec("/api/v1/jobs:dry-run", body, json_body)
        return parse(DryRunOut, data, "dry run")

    def submit_batch(self, documents: list[dict[str, Any]]) -> BatchOut:
        """``POST /api/v1/jobs:batch`` (at most 500 documents): one item per document, in
        order (``status`` 201 stored, else 403 / 409 / 422 with ``detail``)."""
        from scheduler.api.schemas import BatchOut

        data = self.request("POST", "/api/v1/jobs:batch", json={"jobs": documents})
        return parse(BatchOut, data, "batch submit")

    def jobs(self, **params: Any) -> JobPage:
        from scheduler.api.schemas import JobPage

        params = {k: v for k, v in params.items() if v is not None}
        return parse(JobPage, self.request("GET", "/api/v1/jobs", params=params), "job list")

    def job(self, name: str) -> JobOut:
        from scheduler.api.schemas import JobOut

        return parse(JobOut, self.request("GET", f"/api/v1/jobs/{name}"), f"job {name}")

    def events(self, name: str) -> JobEventsOut:
        from scheduler.api.schemas import JobEventsOut

        data = self.request("GET", f"/api/v1/jobs/{name}/events")
        return parse(JobEventsOut, data, f"events of {name}")

    def stop(self, name: str) -> JobOut:
        from scheduler.api.schemas import JobOut

        return parse(JobOut, self.request("POST", f"/api/v1/jobs/{name}/stop"), f"stop {name}")

    def delete(self, name: str, force: bool = False) -> JobDeleteOut:
        from scheduler.api.schemas import JobDeleteOut

        data = self.request(
            "DELETE", f"/api/v1/jobs/{name}", params={"force": "true" if force else "false"}
        )
        return parse(JobDeleteOut, data, f"delete {name}")

    def exec_access(self, name: str, role: str, index: int) -> ExecAccessOut:
        """The address, sshd port and key of a running task (``pasture job exec``)."""
        from scheduler.api.schemas import ExecAccessOut

        data = self.request("POST", f"/api/v1/jobs/{name}/tasks/{role}/{index}/exec")
        return parse(ExecAccessOut, data, f"exec into {name} {role}-{index}")

    def log_files(self, name: str, uid: str | None = None) -> list[LogFileOut]:
        """The job's log files; with ``uid``, of that submission only (404 once the name
        belongs to another submission)."""
        from scheduler.api.schemas import LogFileOut

        params = {"uid": uid} if uid else None
        data = self.request("GET", f"/api/v1/jobs/{name}/logs/files", params=params)
        return parse_list(LogFileOut, data, f"log files of {name}")

    def log_bytes(
        self, name: str, role: str, index: int, offset: int = 0, uid: str | None = None
    ) -> bytes:
        """One task's log bytes from ``offset`` (bytes) to the end of what is written
        (``uid``: as :meth:`log_files`)."""
        return self.log_chunk(name, role, index, offset, uid)[0]

    def log_chunk(
        self,
        name: str,
        role: str,
        index: int,
        offset: int = 0,
        uid: str | None = None,
        since: str | None = None,
        timestamps: bool = False,
    ) -> tuple[bytes, int]:
        """One task's log from byte ``offset``: ``(answer, next offset)``. ``since``
        (10m, an RFC 3339 time) starts at the first line written then or later;
        ``timestamps`` answers whole lines each after its time (the answer is then not a
        byte range of the file: go on from the next offset, the API's
        ``X-Log-Next-Offset``)."""
        import httpx

        params: dict[str, str | int] = {"role": role, "index": index, "offset": offset}
        if uid:
            params["uid"] = uid
        if since is not None:
            params["since"] = since
        if timestamps:
            params["timestamps"] = "true"
        try:
            response = self._http.get(f"/api/v1/jobs/{name}/logs", params=params)
        except httpx.HTTPError as exc:
            raise ApiError(0, f"cannot reach {self.config.endpoint}: {exc}") from None
        if response.status_code >= 400:
            raise _error(response)
        data = response.content
        try:
            next_offset = int(response.headers["X-Log-Next-Offset"])
        except (KeyError, ValueError):  # an API without it: a plain byte range
            next_offset = offset + len(data)
        return data, next_offset

    # -- cluster ------------------------------------------------------------------------
    def nodes(self) -> list[NodeOut]:
        from scheduler.api.schemas import NodeOut

        return parse_list(NodeOut, self.request("GET", "/api/v1/nodes"), "node list")

    def node(self, name: str) -> NodeOut:
        """One node with its events (``GET /api/v1/nodes/{name}``)."""
        from scheduler.api.schemas import NodeOut

        return parse(NodeOut, self.request("GET", f"/api/v1/nodes/{name}"), f"node {name}")

    def node_events(self, name: str) -> NodeEventsOut:
        """A node's events, also once forgotten (``GET /api/v1/nodes/{name}/events``)."""
        from scheduler.api.schemas import NodeEventsOut

        data = self.request("GET", f"/api/v1/nodes/{name}/events")
        return parse(NodeEventsOut, data, f"events of node {name}")

    def forgotten_nodes(self) -> list[ForgottenNodeOut]:
        """Nodes pasture forgot, oldest first (``GET /api/v1/forgotten-nodes``)."""
        from scheduler.api.schemas import ForgottenNodeOut

        data = self.request("GET", "/api/v1/forgotten-nodes")
        return parse_list(ForgottenNodeOut, data, "forgotten nodes")

    def node_action(self, name: str, action: str, reason: str | None = None) -> NodeOut:
        """Cordon, uncordon or drain ``name`` (``reason``: kept in the node's event); the
        answer's ``affected_jobs`` names the jobs with tasks on the node."""
        from scheduler.api.schemas import NodeOut

        params = {"reason": reason} if reason else None
        data = self.request("POST", f"/api/v1/nodes/{name}/{action}", params=params)
        return parse(NodeOut, data, f"{action} {name}")

    def delete_node(self, name: str, *, force: bool = False) -> NodeOut:
        """``DELETE /api/v1/nodes/{name}`` (admin): the node lost now, its record removed."""
        from scheduler.api.schemas import NodeOut

        path = f"/api/v1/nodes/{name}" + ("?force=true" if force else "")
        return parse(NodeOut, self.request("DELETE", path), f"delete {name}")

    def vcs(self) -> list[VcOut]:
        from scheduler.api.schemas import VcOut

        return parse_list(VcOut, self.request("GET", "/api/v1/vcs"), "vc list")

    def status(self) -> StatusOut:
        from scheduler.api.schemas import StatusOut

        return parse(StatusOut, self.request("GET", "/api/v1/status"), "status")

    def whoami(self) -> WhoAmI:
        from scheduler.api.schemas import WhoAmI

        return parse(WhoAmI, self.request("GET", "/api/v1/whoami"), "whoami")
