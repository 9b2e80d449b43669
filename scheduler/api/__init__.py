"""pasture's REST API (FastAPI): ``create_app(settings, store=...)``.

```
request -> BodySizeLimit (413) -> metrics middleware -> router (thin) -> service -> store
                                     auth dependency: bearer token -> TokenInfo (401/403)
ServiceError -> its status; pydantic errors -> 422 with field paths; never 500 for input
```
"""

from scheduler.api.app import create_app

__all__ = ["create_app"]
