"""pasture's REST API (FastAPI): ``create_app(settings, store=...)``.

```
request -> BodySizeLimit (413) -> metrics middleware -> router (thin) -> service -> store
                                     auth dependency: bearer token -> TokenInfo (401/403)
ServiceError -> its status; pydantic errors -> 422 with field paths; never 500 for input
```

The package's import is light: ``create_app`` (FastAPI, Redis, the services) is loaded on
first use, so that the CLI can import :mod:`scheduler.api.schemas` (pydantic only) to
parse the API's answers without loading the server.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from scheduler.api.app import create_app

__all__ = ["create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from scheduler.api.app import create_app

        return create_app
    raise AttributeError(f"module 'scheduler.api' has no attribute {name!r}")
