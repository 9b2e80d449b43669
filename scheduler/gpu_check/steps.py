"""Per-check machinery of the GPU check: outcomes, the summary, hard limits, the step runner."""

from __future__ import annotations

import contextlib
import json
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


class Interrupted(BaseException):
    """The run got SIGTERM or SIGINT (the script's hard limit, a user): not an Exception,
    so no step records it as its own failure; the summary says ``interrupted``."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class StepTimeout(Exception):
    """A step ran past its hard time limit."""


class Skip(Exception):
    """A step cannot run here; the message says why."""


class CheckFailed(AssertionError):
    """A check's rule does not hold; ``details`` keeps what was measured for the summary."""

    def __init__(self, reason: str, details: dict[str, Any]) -> None:
        super().__init__(reason)
        self.details = details


@dataclass
class Check:
    """One check's outcome: ``status`` pass | fail | skip, ``seconds`` it took, ``reason``
    (why it failed or was skipped), ``details`` (what was measured)."""

    name: str
    status: str
    seconds: float = 0.0
    reason: str = ""
    details: dict[str, Any] = field(default_factory=dict)


@dataclass
class Summary:
    """All checks of one run (see the module docstring for the JSON shape)."""

    mode: str
    started_utc: str
    gpus: dict[str, Any] = field(default_factory=dict)
    checks: list[Check] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)
    out: Path | None = None
    interrupted: str | None = None

    def save(self) -> None:
        """Write the JSON summary to ``out`` (when set) atomically: rewritten after every
        check and on exit, so a run killed at its limit leaves what it had measured."""
        if self.out is None:
            return
        tmp = self.out.with_name(self.out.name + ".tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=2) + "\n")
        tmp.replace(self.out)

    def check(self, name: str) -> Check | None:
        """The check called ``name``, None when it did not run."""
        return next((c for c in self.checks if c.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        """The JSON summary."""
        failed = [c.name for c in self.checks if c.status == "fail"]
        return {
            "mode": self.mode,
            "started_utc": self.started_utc,
            "passed": not failed and self.interrupted is None,
            "interrupted": self.interrupted,
            "elapsed_s": round(time.monotonic() - self.started, 1),
            "failed_checks": failed,
            "skipped_checks": [c.name for c in self.checks if c.status == "skip"],
            "gpus": self.gpus,
            "checks": {
                c.name: {k: v for k, v in asdict(c).items() if k != "name"} for c in self.checks
            },
        }


@contextlib.contextmanager
def hard_limit(seconds: float) -> Iterator[None]:
    """Raise :class:`StepTimeout` in this (the main) thread after ``seconds``."""

    def _expired(signum: int, frame: Any) -> None:
        raise StepTimeout(f"step ran past its limit of {seconds:g} s")

    old = signal.signal(signal.SIGALRM, _expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def run_step(
    summary: Summary, name: str, fn: Callable[[], dict[str, Any]], timeout_s: float
) -> Check:
    """Run one check with a hard limit and record it: ``fn`` returns its details (pass),
    raises :class:`Skip` (skip), AssertionError or anything else (fail, with the reason)."""
    t0 = time.monotonic()
    check = Check(name, "pass")
    try:
        with hard_limit(timeout_s):
            check.details = fn()
    except Skip as exc:
        check.status, check.reason = "skip", str(exc)
    except StepTimeout as exc:
        check.status, check.reason = "fail", str(exc)
    except AssertionError as exc:
        check.status, check.reason = "fail", str(exc) or "assertion failed"
        check.details = getattr(exc, "details", {})
    except Exception as exc:  # noqa: BLE001 - a broken step is a failed check, not a crash
        check.status, check.reason = "fail", f"{type(exc).__name__}: {exc}"
    check.seconds = round(time.monotonic() - t0, 2)
    summary.checks.append(check)
    summary.save()
    print(f"[{check.seconds:7.1f}s] {name}: {check.status.upper()} {check.reason}", flush=True)
    return check
