"""``python -m scheduler.bench chaos``: the three chaos rounds in one run, their counts in
one dict: round 1 (:mod:`scheduler.bench.chaos`), the cross-tenant round
(:mod:`scheduler.bench.chaos_tenants`) and round 2 (:mod:`scheduler.bench.chaos_round2`).
What each count means: those modules' docstrings and docs/faults.md."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

from scheduler.bench.chaos import FAULTS, chaos_cluster
from scheduler.bench.chaos_round2 import run_round2
from scheduler.bench.chaos_tenants import cross_tenant_reads


def add_arguments(p: argparse.ArgumentParser) -> None:
    """``--faults N``, ``--jobs N``, ``--work-s S``."""
    p.add_argument("--faults", type=int, default=len(FAULTS), help="faults to inject")
    p.add_argument("--jobs", type=int, default=20, help="jobs submitted before each fault")
    p.add_argument("--work-s", type=float, default=12.0, help="seconds each task works")
    p.add_argument(
        "--round2",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also run the round-2 faults (gang node loss, frozen node, unlaunchable task, "
        "store outage of 2/3 of the lease, Sentinel failover; about 3 minutes)",
    )


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Inject ``args.faults`` faults (cycling through FAULTS) and return the counts, the
    cross-tenant round's (:func:`scheduler.bench.chaos_tenants.cross_tenant_reads`) and,
    with ``args.round2``, round 2's (``round2``,
    :func:`scheduler.bench.chaos_round2.run_round2`). A fault or round that fails is
    named in ``errors``; every count gathered is kept."""
    errors: list[str] = []
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="pasture-chaos-") as tmp:
        with chaos_cluster(Path(tmp) / "dev", cpu_per_node=2) as chaos:
            for i in range(args.faults):
                fault = FAULTS[i % len(FAULTS)]
                try:
                    names = chaos.submit(args.jobs, args.work_s, cpu_m=250)
                    chaos.wait_running(names)
                    chaos.inject(fault)
                    chaos.wait_done(names)
                except Exception as exc:  # noqa: BLE001 - counted, the other faults go on
                    errors.append(f"{fault}: {type(exc).__name__}: {exc}")
            chaos.wait_done()
            out = chaos.check()
        try:
            out.update(cross_tenant_reads(Path(tmp) / "tenant"))
        except Exception as exc:  # noqa: BLE001
            errors.append(f"cross_tenant: {type(exc).__name__}: {exc}")
        if getattr(args, "round2", False):
            out["round2"] = run_round2(Path(tmp))
    return {"faults": args.faults, **out, "errors": errors}
