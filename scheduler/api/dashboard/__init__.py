"""The web dashboard served by the API under ``/dashboard`` (see docs/dashboard.md).

- ``pages.py``    routes: login, overview, nodes, jobs, one job (+ log tail), VCs
- ``sessions.py`` server-side sessions in Redis and CSRF tokens
- ``views.py``    what the pages show, computed from store records
- ``templates/``, ``static/`` Jinja2 templates, CSS and the log-tail script
"""

from scheduler.api.dashboard.pages import router

__all__ = ["router"]
