"""Failure diagnosis: why a task failed, and whether a retry can help.

Rules are data (``scheduler/rules/diagnosis_rules.yaml``, plus an operator's file named by the
agent setting ``diagnosis_rules``), modelled on OpenPAI's job exit spec (microsoft/pai,
``src/k8s-job-exit-spec/config/k8s-job-exit-spec.yaml``: ordered exit-code / log-regex
patterns; any pattern of a rule may match, all fields of a pattern must hold; the first
matching rule wins)::

    exit code + tail of the log (at most TAIL_BYTES) + executor evidence + task state/message
        -> rules in order (operator's first, then the shipped ones)
        -> Diagnosis(kind, summary, retry, hint)

The agent calls :func:`diagnose` when it reports a failed task and stores the result in the
task record (``TaskRecord.diagnosis``); the loop falls back to :func:`diagnose_task` for
tasks it ended itself (node lost). ``retry.retry_on`` in a job spec names ``kind`` values.
"""

from __future__ import annotations

import logging
import re
import signal
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from scheduler.states import TASK_DONE_STATES, TaskState

log = logging.getLogger("pasture.diagnosis")

RULES_FILE = Path(__file__).with_name("diagnosis_rules.yaml")
TAIL_BYTES = 64 * 1024
"""The classifier reads at most this many bytes from the end of a task's log."""
LINE_CHARS = 1000
"""Longer log lines are cut to their last this many characters before matching."""

_PATTERN_FIELDS = {"exit_codes", "exit_code_range", "log", "message", "state", "evidence", "detail"}
_RULE_FIELDS = {"kind", "summary", "retry", "hint", "match"}


class RulesError(ValueError):
    """A rules file is unreadable or malformed (the message names the file and field)."""


@dataclass(frozen=True)
class Diagnosis:
    """The class of a failure.

    Attributes:
        kind: the rule's class name (``oom_killed``, ``cuda_oom``, ``nccl_error``...).
        summary: one line for people (the matched log line filled in).
        retry: whether retrying the same job can help.
        hint: what to do about it.
    """

    kind: str
    summary: str
    retry: bool
    hint: str = ""

    def to_dict(self) -> dict[str, Any]:
        """``{kind, summary, retry, hint}`` (what the task record and the API carry)."""
        return asdict(self)


@dataclass(frozen=True)
class _Pattern:
    exit_codes: tuple[int, ...] | None
    exit_code_range: tuple[int, int] | None
    log: re.Pattern[str] | None
    message: re.Pattern[str] | None
    state: str | None
    evidence: tuple[tuple[str, Any], ...]
    detail: str | None


@dataclass(frozen=True)
class Rule:
    """One rule: ``kind``, ``summary`` template, ``retry``, ``hint`` and its patterns."""

    kind: str
    summary: str
    retry: bool
    hint: str
    patterns: tuple[_Pattern, ...]


def _pattern(src: str, where: str, raw: Any) -> _Pattern:
    if not isinstance(raw, dict) or not raw:
        raise RulesError(f"{src}: {where}: expected a non-empty mapping, got {raw!r}")
    unknown = set(raw) - _PATTERN_FIELDS
    if unknown:
        raise RulesError(
            f"{src}: {where}: unknown field(s) {sorted(unknown)};"
            f" expected {sorted(_PATTERN_FIELDS)}"
        )

    def regex(name: str) -> re.Pattern[str] | None:
        if raw.get(name) is None:
            return None
        try:
            return re.compile(str(raw[name]))
        except re.error as exc:
            raise RulesError(f"{src}: {where}.{name}: not a valid regex: {exc}") from None

    codes = raw.get("exit_codes")
    if codes is not None and not (
        isinstance(codes, list) and all(isinstance(c, int) for c in codes)
    ):
        raise RulesError(f"{src}: {where}.exit_codes: expected a list of integers, got {codes!r}")
    rng = raw.get("exit_code_range")
    if rng is not None and not (
        isinstance(rng, list) and len(rng) == 2 and all(isinstance(c, int) for c in rng)
    ):
        raise RulesError(f"{src}: {where}.exit_code_range: expected [low, high], got {rng!r}")
    ev = raw.get("evidence") or {}
    if not isinstance(ev, dict):
        raise RulesError(f"{src}: {where}.evidence: expected a mapping, got {ev!r}")
    return _Pattern(
        exit_codes=tuple(codes) if codes is not None else None,
        exit_code_range=(rng[0], rng[1]) if rng is not None else None,
        log=regex("log"),
        message=regex("message"),
        state=raw.get("state"),
        evidence=tuple(sorted(ev.items())),
        detail=raw.get("detail"),
    )


def parse_rules(data: Any, src: str = "<rules>") -> list[Rule]:
    """Rules from a loaded YAML document ``{version: 1, rules: [...]}``.

    Raises:
        RulesError: a missing / unknown field, a bad regex, a wrong type (named).
    """
    if not isinstance(data, dict) or not isinstance(data.get("rules"), list):
        raise RulesError(f"{src}: expected a mapping with a 'rules' list")
    rules = []
    for i, raw in enumerate(data["rules"]):
        where = f"rules[{i}]"
        if not isinstance(raw, dict):
            raise RulesError(f"{src}: {where}: expected a mapping, got {raw!r}")
        unknown = set(raw) - _RULE_FIELDS
        if unknown:
            raise RulesError(f"{src}: {where}: unknown field(s) {sorted(unknown)}")
        kind = raw.get("kind")
        if not isinstance(kind, str) or not re.fullmatch(r"[a-z][a-z0-9_]*", kind):
            raise RulesError(f"{src}: {where}.kind: expected a snake_case name, got {kind!r}")
        if not isinstance(raw.get("retry"), bool):
            raise RulesError(f"{src}: {where}.retry: expected true or false")
        match = raw.get("match")
        if not isinstance(match, list) or not match:
            raise RulesError(f"{src}: {where}.match: expected a non-empty list of patterns")
        rules.append(
            Rule(
                kind=kind,
                summary=str(raw.get("summary") or kind),
                retry=raw["retry"],
                hint=str(raw.get("hint") or ""),
                patterns=tuple(
                    _pattern(src, f"{where}.match[{j}]", p) for j, p in enumerate(match)
                ),
            )
        )
    return rules


def load_rules(path: str | Path) -> list[Rule]:
    """Rules of one YAML file. Raises RulesError (unreadable, not YAML, malformed)."""
    try:
        data = yaml.safe_load(Path(path).read_text())
    except OSError as exc:
        raise RulesError(f"cannot read diagnosis rules {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise RulesError(f"{path}: not valid YAML: {exc}") from None
    return parse_rules(data, str(path))


@lru_cache(maxsize=8)
def rules_for(extra: str | None = None) -> tuple[Rule, ...]:
    """The operator's rules from ``extra`` (tried first), then the shipped ones (cached)."""
    shipped = load_rules(RULES_FILE)
    return tuple((load_rules(extra) if extra else []) + shipped)


def read_tail(path: str | Path | None, limit: int = TAIL_BYTES) -> str:
    """The last ``limit`` bytes of a file as text ('' when missing); never reads more.

    The file is a task's log on the share, which the task could have replaced: it is
    opened through :mod:`scheduler.sharefs` beneath the share (the directory
    above the path's last ``jobs`` component), so a symbolic or hard link, a FIFO or a
    linked directory gives '' instead of another file's bytes or a blocked agent.
    """
    if path is None:
        return ""
    from scheduler import sharefs

    p = Path(path)
    parts = p.parts
    cut = max((i for i, part in enumerate(parts) if part == "jobs"), default=len(parts) - 1)
    root, rel = Path(*parts[:cut]) if cut else Path("."), "/".join(parts[cut:])
    try:
        with sharefs.open_file(root, rel) as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - limit))
            return f.read(limit).decode("utf-8", "replace")
    except OSError:
        return ""


def _signal_name(code: int | None) -> str:
    if code is None or not 128 < code <= 192:
        return "?"
    try:
        return signal.Signals(code - 128).name
    except ValueError:
        return f"{code - 128}"


def _matches(
    p: _Pattern,
    code: int | None,
    log: str,
    message: str,
    state: str,
    evidence: dict[str, Any],
) -> tuple[bool, str]:
    if p.state is not None and p.state != state:
        return False, ""
    if p.exit_codes is not None and code not in p.exit_codes:
        return False, ""
    if p.exit_code_range is not None and (
        code is None or not p.exit_code_range[0] <= code <= p.exit_code_range[1]
    ):
        return False, ""
    for key, want in p.evidence:
        if evidence.get(key) != want:
            return False, ""
    detail = ""
    for rx, text in ((p.message, message), (p.log, log)):
        if rx is None:
            continue
        m = rx.search(text)
        if m is None:
            return False, ""
        detail = (m.groupdict().get("detail") or m.group(0)).strip()
    return True, p.detail or detail


def diagnose(
    exit_code: int | None,
    log_tail: str = "",
    *,
    state: str = "failed",
    message: str = "",
    evidence: dict[str, Any] | None = None,
    rules: tuple[Rule, ...] | None = None,
) -> Diagnosis | None:
    """Classify one failed task.

    Args:
        exit_code: the task's exit code (None: none, e.g. lost or never started).
        log_tail: the end of the task's log (use :func:`read_tail`; bounded).
        state: the task's state (``failed``, ``lost``, ``stopped``).
        message: the task's message (``could not start: ...``).
        evidence: what the executor saw (``{"oom_killed": True}``,
            ``{"memory_limit": "cgroup-v1", "oom_killed": False}``), see ``Executor.evidence``.
        rules: default :func:`rules_for` ``()`` (shipped rules only).

    Returns:
        The first matching rule's :class:`Diagnosis`, or None when no rule matched.
    """
    ev = evidence or {}
    # very long lines (progress bars, binary junk) keep their last LINE_CHARS characters, so
    # that no pattern backtracks over a whole megabyte line
    log_tail = "\n".join(line[-LINE_CHARS:] for line in log_tail.splitlines())
    for rule in rules if rules is not None else rules_for():
        for p in rule.patterns:
            ok, detail = _matches(p, exit_code, log_tail, message, state, ev)
            if ok:
                summary = rule.summary.format_map(
                    {
                        "detail": detail[:300],
                        "exit_code": exit_code,
                        "signal": _signal_name(exit_code),
                    }
                )
                return Diagnosis(rule.kind, summary, rule.retry, rule.hint)
    return None


def diagnose_task(task: Any, rules: tuple[Rule, ...] | None = None) -> Diagnosis | None:
    """The diagnosis of a task record (:class:`scheduler.store.records.TaskRecord` or its
    dict): the one the agent stored, else one from its state, exit code and message alone
    (node lost, preempted: the loop ends those tasks, not the agent). None for a task that
    did not fail."""
    get = task.get if isinstance(task, dict) else lambda k, d=None: getattr(task, k, d)
    stored = get("diagnosis")
    if isinstance(stored, dict) and stored.get("kind"):
        return Diagnosis(
            str(stored["kind"]),
            str(stored.get("summary", "")),
            bool(stored.get("retry")),
            str(stored.get("hint", "")),
        )
    state = str(get("state") or "")
    if state not in TASK_DONE_STATES or state == TaskState.SUCCEEDED:
        return None
    rules = rules if rules is not None else rules_for()
    if state == "stopped":  # a stop is no failure unless a rule names the state (preempted)
        rules = tuple(r for r in rules if any(p.state == "stopped" for p in r.patterns))
    return diagnose(get("exit_code"), state=state, message=str(get("message") or ""), rules=rules)


def diagnose_report(
    log_path: str | Path | None,
    exit_code: int | None,
    message: str = "",
    evidence: dict[str, Any] | None = None,
    extra_rules: str | Path | None = None,
) -> dict[str, Any] | None:
    """What the agent attaches to a failed task's report: :func:`diagnose` of the tail of
    ``log_path`` as a dict (``{kind, summary, retry, hint}``), None when nothing matched.
    A broken operator rules file is logged and the shipped rules are used (a report must
    not fail because of it)."""
    try:
        rules = rules_for(str(extra_rules) if extra_rules else None)
    except RulesError:
        log.exception("operator diagnosis rules unusable; using the shipped rules")
        rules = rules_for()
    d = diagnose(exit_code, read_tail(log_path), message=message, evidence=evidence, rules=rules)
    return d.to_dict() if d else None


def diagnosis_text(task: Any) -> str:
    """One line for ``pasture job show``: ``kind: summary (retry can help | retry will not
    help)``, '' for a task that did not fail."""
    d = diagnose_task(task)
    if d is None:
        return ""
    return f"{d.kind}: {d.summary} ({'retry can help' if d.retry else 'retry will not help'})"
