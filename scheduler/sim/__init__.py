"""Trace-driven simulator: replays GPU-cluster traces through the same ``scheduler.core``
the service runs, under named policies (``scheduler.core.presets``), with metrics and lower
bounds. Entry points: ``python -m scheduler.sim`` / ``pasture sim`` (see ``cli.py``)."""
