"""Job and task states are defined once (scheduler/states.py): no other module of the
package spells its own set of final states as string literals (they were six copies)."""

from __future__ import annotations

import ast
from pathlib import Path

import scheduler
from scheduler.states import TERMINAL_JOB_STATES, WAITING_JOB_STATES, JobState, TaskState

ROOT = Path(scheduler.__file__).parent
STATES = {s.value for s in JobState} | {s.value for s in TaskState}


def _state_literals() -> list[str]:
    """``path:line`` of every tuple/list/set literal of state names holding two or more
    final ones ("succeeded", "failed", "stopped")."""
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        if path.name == "states.py" or "sim" in path.relative_to(ROOT).parts[:1]:
            continue  # the simulator keeps its own job model (scheduler/sim/README.md)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Tuple | ast.List | ast.Set):
                words = [e.value for e in node.elts if isinstance(e, ast.Constant)]
                final = set(words) & set(TERMINAL_JOB_STATES)
                if len(final) >= 2 and len(words) == len(node.elts) and set(words) <= STATES:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_no_module_spells_its_own_set_of_final_states():
    assert _state_literals() == []


def test_the_sets_are_views_of_the_enum():
    assert {s.value for s in JobState if s.terminal} == set(TERMINAL_JOB_STATES)
    assert "failed" in TERMINAL_JOB_STATES and "preempted" in WAITING_JOB_STATES
    assert TaskState("lost").done and not TaskState("running").done
