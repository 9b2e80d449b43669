"""Benchmarks that print their figures (``python -m scheduler.bench <name> --json``).

Each benchmark is a module here exposing ``add_arguments(parser)`` and
``run(args) -> dict``; the dict is what ``--json`` prints. Speed targets are checked by
reading these figures, never by timed tests.
"""

BENCHMARKS: dict[str, str] = {
    # name: module (imported lazily so one benchmark's dependencies do not load the others)
    "placement": "scheduler.bench.placement",
    "e2e": "scheduler.bench.e2e",
    "dashboard": "scheduler.bench.dashboard",
    "chaos": "scheduler.bench.chaos_bench",
    "cli": "scheduler.bench.cli",
    "flood": "scheduler.bench.flood",
    "exec": "scheduler.bench.execbench",
}
