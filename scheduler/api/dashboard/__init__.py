"""The web dashboard served by the API under ``/dashboard`` (see docs/dashboard.md).

- ``pages.py``    routes: login, overview, usage chart data, nodes, jobs, one job (+ log
  tail), VCs
- ``actions.py``  the state-changing forms (stop, resubmit, cordon / drain), confirmed
- ``submit.py``   the submit form: a pasted spec, its dry run, then the submit
- ``joblogs.py``  every task log of a job on one page, search and download
- ``sessions.py`` server-side sessions in Redis and CSRF tokens
- ``views.py``    what the pages show, computed from the services' answers parsed with
  the API's response models (``JobOut``, ``TaskOut``, ``NodeOut``); the pages read
  nothing but the services
- ``templates/``, ``static/`` Jinja2 templates, CSS, scripts and the vendored
  uPlot (``static/README.md``)
"""

from scheduler.api.dashboard import (  # noqa: F401 - each registers its routes
    actions,
    joblogs,
    submit,
)
from scheduler.api.dashboard.pages import router

__all__ = ["router"]
