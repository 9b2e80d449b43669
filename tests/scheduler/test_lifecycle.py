"""scheduler.rules.lifecycle.decide: task-state combinations -> the job's next step."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scheduler.rules.lifecycle import Ending, FreeRequeues, decide, expired, free_requeue_streak
from scheduler.spec import parse_job_spec
from scheduler.spec.facts import WAIT, initial_desired
from scheduler.store.records import JobState, TaskRecord

S, R, OK, F, X, L = "scheduled", "running", "succeeded", "failed", "stopped", "lost"


def spec(roles: dict, **extra):
    return parse_job_spec({"name": "j", "roles": roles, **extra})


def role(replicas=1, **extra):
    return {"replicas": replicas, "command": "true", **extra}


def tasks(**by_role: str) -> list[TaskRecord]:
    """tasks(master="R", worker="RRF"): one task per letter, state by letter."""
    code = {"S": S, "R": R, "O": OK, "F": F, "X": X, "L": L}
    out = []
    for name, letters in by_role.items():
        for i, c in enumerate(letters):
            state = code[c]
            out.append(
                TaskRecord(
                    role=name,
                    index=i,
                    attempt=1,
                    node=f"n{i}",
                    state=state,
                    exit_code=0 if state == OK else (3 if state == F else None),
                    message="node gone" if state == L else "",
                )
            )
    return out


MASTER_WORKER = {"master": role(1, completion={"min_succeeded": 1}), "worker": role(3)}

# (roles, extra spec fields, task states, expected ending state or None, reason fragment)
CASES = [
    # defaults: every task must succeed; one failure fails (max_attempts 1)
    ({"a": role(2)}, {}, {"a": "RR"}, None, ""),
    ({"a": role(2)}, {}, {"a": "OR"}, None, ""),
    ({"a": role(2)}, {}, {"a": "OO"}, OK, "all tasks succeeded"),
    ({"a": role(2)}, {}, {"a": "FR"}, F, "1 of 1 attempts failed"),
    ({"a": role(2)}, {"retry": {"max_attempts": 3}}, {"a": "FR"}, "queued", "retrying"),
    (
        {"a": role(2)},
        {"retry": {"max_attempts": 3, "fail_on_exit_codes": [3]}},
        {"a": "F"},
        F,
        "not retried",
    ),
    # OpenPAI master/worker: the master's success ends the job, workers still running
    (MASTER_WORKER, {}, {"master": "O", "worker": "RRR"}, OK, "role master succeeded"),
    (MASTER_WORKER, {}, {"master": "R", "worker": "OOO"}, None, ""),
    # min_failed tolerates failures; the job ends when all ended
    ({"w": role(3, completion={"min_failed": 2})}, {}, {"w": "FRR"}, None, ""),
    ({"w": role(3, completion={"min_failed": 2})}, {}, {"w": "FOO"}, OK, "within tolerance"),
    ({"w": role(3, completion={"min_failed": 2})}, {}, {"w": "FFR"}, F, "2 task(s) of role w"),
    # legacy policies.completion
    (
        {"a": role(1), "w": role(2)},
        {"policies": {"completion": {"role": "w", "when": "any"}}},
        {"a": "R", "w": "OR"},
        OK,
        "role w succeeded",
    ),
    (
        {"a": role(1), "w": role(2)},
        {"policies": {"completion": {"role": "w", "when": "all"}}},
        {"a": "R", "w": "OR"},
        None,
        "",
    ),
    # Volcano minSuccess: successes of any roles
    (
        {"a": role(1), "b": role(2)},
        {"min_succeeded": 2},
        {"a": "O", "b": "RR"},
        None,
        "",
    ),
    (
        {"a": role(1), "b": role(2)},
        {"min_succeeded": 2},
        {"a": "O", "b": "OR"},
        OK,
        "min_succeeded is 2",
    ),
    # Volcano TaskCompleted -> CompleteJob on the worker role
    (
        {"ps": role(1), "worker": role(2)},
        {
            "policies": {
                "on_events": [
                    {"event": "task_completed", "action": "complete_job", "role": "worker"}
                ]
            }
        },
        {"ps": "R", "worker": "OO"},
        OK,
        "task_completed -> complete_job",
    ),
    (
        {"ps": role(1), "worker": role(2)},
        {
            "policies": {
                "on_events": [
                    {"event": "task_completed", "action": "complete_job", "role": "worker"}
                ]
            }
        },
        {"ps": "O", "worker": "OR"},
        None,
        "",
    ),
    # task_failed -> fail_job / terminate_job / restart_job
    (
        {"a": role(2)},
        {
            "retry": {"max_attempts": 3},
            "policies": {"on_events": [{"event": "task_failed", "action": "fail_job"}]},
        },
        {"a": "FR"},
        F,
        "task_failed -> fail_job",
    ),
    (
        {"a": role(2)},
        {"policies": {"on_events": [{"event": "task_failed", "action": "terminate_job"}]}},
        {"a": "FR"},
        X,
        "terminate_job",
    ),
    (
        {"a": role(2)},
        {
            "retry": {"max_attempts": 2, "fail_on_exit_codes": [3]},
            "policies": {"on_events": [{"event": "task_failed", "action": "restart_job"}]},
        },
        {"a": "FR"},
        "queued",
        "retrying",
    ),
    # a role-scoped rule does not apply to other roles
    (
        {"a": role(1), "b": role(1)},
        {
            "policies": {
                "on_events": [{"event": "task_failed", "action": "terminate_job", "role": "b"}]
            }
        },
        {"a": "F", "b": "R"},
        F,
        "attempts failed",
    ),
    # a lost task: the "unknown" event, no exit code, marked as the infrastructure's
    ({"a": role(2)}, {"retry": {"max_attempts": 2}}, {"a": "LR"}, "queued", "lost"),
    (
        {"a": role(2)},
        {"policies": {"on_events": [{"event": "unknown", "action": "complete_job"}]}},
        {"a": "LR"},
        OK,
        "unknown -> complete_job",
    ),
    # stopped without a request: task_evicted
    (
        {"a": role(1)},
        {"policies": {"on_events": [{"event": "task_evicted", "action": "fail_job"}]}},
        {"a": "X"},
        F,
        "task_evicted -> fail_job",
    ),
]


@pytest.mark.parametrize(("roles", "extra", "states", "want", "why"), CASES)
def test_decision_table(roles, extra, states, want, why):
    step = decide(spec(roles, **extra), tasks(**states))
    if want is None:
        assert step.ending is None, step.ending
    else:
        assert step.ending is not None
        assert step.ending.state == JobState(want)
        assert why in step.ending.reason


def test_failure_ending_carries_exit_code_and_lost_is_infrastructure():
    failed = decide(spec({"a": role(1)}), tasks(a="F")).ending
    assert failed.failure and failed.exit_code == 3 and not failed.infrastructure
    lost = decide(spec({"a": role(1)}), tasks(a="L")).ending
    assert not lost.failure and lost.exit_code is None and lost.infrastructure
    assert lost.cause == "node_lost"


@pytest.mark.parametrize("policy", [{}, {"on_task_failure": "fail_job"}])
def test_infrastructure_faults_requeue_uncharged_whatever_the_retry_policy(policy):
    """Default retry (max_attempts 1) and fail_job would fail on the task's own failure;
    a task ended by a lost node, fencing or an agent restart requeues without a charge."""
    s = spec({"a": role(2)}, policies=policy) if policy else spec({"a": role(2)})
    for cause in ("node_lost", "fenced", "agent_restart"):
        ts = tasks(a="LR")
        ts[0].cause = cause
        ending = decide(s, ts).ending
        assert ending.state == JobState.QUEUED and not ending.failure, ending
        assert ending.infrastructure and ending.cause == cause
        assert Ending.from_dict(ending.to_dict()) == ending
    assert decide(s, tasks(a="FR")).ending.state == JobState.FAILED  # the task's own


def _attempt(cause, state="queued", charged=False):
    return {"attempt": 1, "state": state, "reason": "", "cause": cause, "charged": charged}


def test_the_free_requeue_streak_counts_infrastructure_endings_in_a_row():
    """Counted back from the latest attempt; the tasks' own outcome (charged or not), a
    preemption, a drain or a charged ending stops the count."""
    own = _attempt("", charged=True)
    assert free_requeue_streak([]) == ()
    assert free_requeue_streak([_attempt("node_lost"), _attempt("not_started")]) == (
        "node_lost",
        "not_started",
    )
    assert free_requeue_streak([_attempt("fenced"), own, _attempt("not_started")]) == (
        "not_started",
    )
    for stop in (_attempt("preempted"), _attempt("drained"), _attempt(""), own):
        assert free_requeue_streak([_attempt("evicted"), stop]) == ()
    assert free_requeue_streak([_attempt("not_started", state="failed", charged=True)]) == ()


def test_free_requeues_beyond_the_cap_fail_the_job_naming_causes_and_setting():
    """Issue 35's risk: with a cap of 2, two infrastructure endings in a row were requeued
    free; the third fails the job (charged), naming the causes and the setting."""
    s = spec({"a": role(1)})
    ts = tasks(a="L")
    ts[0].cause = "not_started"
    below = decide(s, ts, requeues=FreeRequeues(("not_started",), 2)).ending
    assert below.state == JobState.QUEUED and not below.failure, below
    at = decide(s, ts, requeues=FreeRequeues(("evicted", "not_started"), 2)).ending
    assert at.state == JobState.FAILED and at.failure and at.cause == "not_started", at
    assert "3 attempts in a row" in at.reason and "evicted x1, not_started x2" in at.reason
    assert "loop.max_free_requeues is 2" in at.reason
    uncapped = decide(s, ts, requeues=FreeRequeues(("not_started",) * 50, None)).ending
    assert uncapped.state == JobState.QUEUED


def test_retry_budget_counts_failed_attempts():
    s = spec({"a": role(1)}, retry={"max_attempts": 3})
    assert decide(s, tasks(a="F"), failures=1).ending.state == JobState.QUEUED
    assert decide(s, tasks(a="F"), failures=2).ending.state == JobState.FAILED


def test_stop_request_wins():
    step = decide(spec({"a": role(1)}), tasks(a="O"), stop_requested="by ann")
    assert step.ending == Ending(JobState.STOPPED, "by ann")


def test_draining_node_requeues_without_failure():
    step = decide(spec({"a": role(2)}), tasks(a="RR"), draining=["n1"])
    assert step.ending.state == JobState.QUEUED and step.ending.preempted
    assert not step.ending.failure and "n1" in step.ending.reason


def test_max_task_retries_restarts_in_place_then_fails():
    s = spec({"a": role(2, max_task_retries=2)})
    ts = tasks(a="FR")
    step = decide(s, ts)
    assert step.ending is None
    assert [(r.key, r.number) for r in step.restart] == [("a-0", 1)]
    ts[0].restarts = 2
    step = decide(s, ts)
    assert step.restart == () and step.ending.state == JobState.FAILED


def test_restart_task_rule_uses_the_retry_budget_when_the_role_sets_none():
    rules = {"on_events": [{"event": "task_failed", "action": "restart_task"}]}
    s = spec({"a": role(1)}, retry={"max_attempts": 3}, policies=rules)
    ts = tasks(a="F")
    assert decide(s, ts).restart[0].number == 1
    ts[0].restarts = 2
    assert decide(s, ts).ending.state == JobState.QUEUED  # then the default: retry the job


def test_a_lost_task_cannot_restart_in_place():
    s = spec({"a": role(2, max_task_retries=3)}, retry={"max_attempts": 2})
    step = decide(s, tasks(a="LR"))
    assert step.restart == () and step.ending.state == JobState.QUEUED


def test_min_available_job_is_not_done_until_every_replica_ended():
    """replicas 6, min_available 3: four placed and succeeded is not success."""
    s = spec({"w": role(6, min_available=3)})
    step = decide(s, tasks(w="OOOO"))
    assert step.ending is None and step.missing == {"w": 2}
    assert decide(s, tasks(w="OOOOOO")).ending.state == JobState.SUCCEEDED


def test_depends_on_releases_waiting_tasks_once_dependencies_run():
    s = spec({"ps": role(2), "worker": role(2, depends_on=["ps"])})
    assert initial_desired(s, "worker") == WAIT and initial_desired(s, "ps") == "run"
    ts = tasks(ps="RS", worker="SS")
    for t in ts[2:]:
        t.desired = WAIT
    assert decide(s, ts).release == ()
    ts[1].state = R
    assert decide(s, ts).release == ("worker-0", "worker-1")


def test_expired():
    assert expired(100.0, 60, 160.0) and not expired(100.0, 60, 159.0)
    assert not expired(None, 60, 1e9) and not expired(100.0, None, 1e9)


def test_ending_round_trips_and_reads_the_commit_scripts_preemption():
    e = Ending(JobState.FAILED, "x", failure=True, exit_code=2, infrastructure=True)
    assert Ending.from_dict(e.to_dict()) == e
    pre = Ending.from_dict({"state": "queued", "reason": "preempted", "preempted": True})
    assert pre.preempted and not pre.failure


@given(st.lists(st.sampled_from("RSOFXL"), min_size=1, max_size=6), st.integers(1, 3))
def test_an_ending_never_succeeds_with_a_failure_beyond_tolerance(letters, tolerance):
    tolerance = min(tolerance, len(letters))
    s = spec({"w": role(len(letters), completion={"min_failed": tolerance})})
    ts = tasks(w="".join(letters))
    step = decide(s, ts)
    bad = sum(1 for c in letters if c in "FXL")
    if bad >= tolerance:
        assert step.ending is not None and step.ending.state != JobState.SUCCEEDED
    elif all(c in "OFXL" for c in letters):
        assert step.ending is not None and step.ending.state == JobState.SUCCEEDED
    else:
        assert step.ending is None


@pytest.mark.parametrize(
    ("doc", "fragment"),
    [
        ({"roles": {"a": role(1, completion={"min_succeeded": 2})}}, "completion.min_succeeded"),
        ({"roles": {"a": role(1, depends_on=["b"])}}, "depends_on"),
        ({"roles": {"a": role(1, depends_on=["b"]), "b": role(1, depends_on=["a"])}}, "cycle"),
        (
            {
                "roles": {"a": role(1)},
                "policies": {"on_events": [{"event": "task_failed", "action": "x"}]},
            },
            "action",
        ),
        (
            {
                "roles": {"a": role(1)},
                "policies": {
                    "on_events": [{"event": "task_failed", "action": "fail_job", "role": "b"}]
                },
            },
            "on_events[0].role",
        ),
        ({"roles": {"a": role(1, max_task_retries=-1)}}, "max_task_retries"),
        ({"roles": {"a": role(1)}, "ttl_after_finished": -1}, "ttl_after_finished"),
        ({"roles": {"a": role(1)}, "ttl_after_finished": 10**400}, "ttl_after_finished"),
        ({"roles": {"a": role(2)}, "min_succeeded": 3}, "min_succeeded"),
    ],
)
def test_bad_lifecycle_fields_are_refused_by_name(doc, fragment):
    from scheduler.spec import SpecError

    with pytest.raises(SpecError) as err:
        parse_job_spec({"name": "j", **doc})
    assert fragment in str(err.value)


EVENTS = ["task_completed", "task_failed", "task_evicted", "unknown"]
ACTIONS = ["complete_job", "restart_job", "restart_task", "fail_job", "terminate_job"]


@st.composite
def jobs_and_tasks(draw):
    """A spec with 1-3 roles and random lifecycle fields, and its tasks in random states."""
    names = ["a", "b", "c"][: draw(st.integers(1, 3))]
    roles = {}
    for n in names:
        replicas = draw(st.integers(1, 4))
        r = role(replicas, max_task_retries=draw(st.none() | st.integers(0, 2)))
        comp = {}
        if draw(st.booleans()):
            comp["min_succeeded"] = draw(st.integers(1, replicas))
        if draw(st.booleans()):
            comp["min_failed"] = draw(st.integers(1, replicas))
        if comp:
            r["completion"] = comp
        roles[n] = r
    rules = draw(
        st.lists(
            st.fixed_dictionaries(
                {"event": st.sampled_from(EVENTS), "action": st.sampled_from(ACTIONS)},
                optional={"role": st.sampled_from(names)},
            ),
            max_size=3,
        )
    )
    s = spec(roles, retry={"max_attempts": draw(st.integers(1, 3))}, policies={"on_events": rules})
    placed = {n: draw(st.integers(1, roles[n]["replicas"])) for n in names}
    letters = {
        n: "".join(draw(st.sampled_from("RSOFXL")) for _ in range(k)) for n, k in placed.items()
    }
    ts = tasks(**letters)
    for t in ts:
        t.restarts = draw(st.integers(0, 3))
    return s, ts, draw(st.integers(0, 2))


@given(jobs_and_tasks())
def test_decide_is_total_and_its_steps_are_consistent(case):
    s, ts, failures = case
    step = decide(s, ts, failures=failures)
    by_key = {t.key: t for t in ts}
    if step.ending is not None:
        assert step.restart == () and step.release == ()
        assert isinstance(step.ending.reason, str) and step.ending.reason
        if step.ending.state == JobState.QUEUED and step.ending.failure:
            assert failures + 1 < s.retry.max_attempts
    for r in step.restart:  # only failed or evicted tasks restart, within their budget
        t = by_key[r.key]
        assert t.state in (F, X) and r.number == t.restarts + 1
        assert t.restarts < max(s.roles[t.role].max_task_retries or 0, s.retry.max_attempts - 1)
    placed_all = all(sum(t.role == n for t in ts) == r.replicas for n, r in s.roles.items())
    if placed_all and all(t.state == OK for t in ts):
        assert step.ending is not None
    if not placed_all:  # unplaced replicas: never "all ended"; without an ending, missing
        assert step.ending is not None or step.missing
        assert step.ending is None or not step.ending.reason.startswith("all tasks")


def _restart_role_spec(max_attempts=3, event="task_failed"):
    return spec(
        {"ps": role(1), "worker": role(3)},
        retry={"max_attempts": max_attempts},
        policies={"on_events": [{"event": event, "action": "restart_role", "role": "worker"}]},
    )


def test_restart_role_stops_the_running_tasks_of_the_role_then_restarts_them_all():
    s = _restart_role_spec()
    ts = tasks(ps="R", worker="RFR")
    step = decide(s, ts)
    assert step.ending is None and step.restart == ()
    assert step.stop == ("worker-0", "worker-2")  # ps keeps running
    for t in ts:  # asked to stop, one still stopping: wait for it
        t.desired = "stop" if t.key in step.stop else t.desired
    ts[1].state = "stopped"
    step = decide(s, ts)
    assert (step.ending, step.restart, step.stop) == (None, (), ("worker-2",))
    ts[3].state = "stopped"  # stopped at the loop's request: not an eviction
    step = decide(s, ts)
    assert step.ending is None and step.stop == ()
    assert [(r.key, r.number) for r in step.restart] == [
        ("worker-0", 1),
        ("worker-1", 1),
        ("worker-2", 1),
    ]
    assert "retry 1 of 2" in step.restart[0].reason


def test_restart_role_is_charged_to_the_retry_budget_like_restart_job():
    s = _restart_role_spec(max_attempts=3)
    ts = tasks(ps="R", worker="FXX")
    for t in ts:
        t.desired = "stop" if t.state == X else t.desired
        t.restarts = 1 if t.role == "worker" else 0  # one role restart already done
    step = decide(s, ts)  # 0 failures + 1 role restart + 1 < 3: once more
    assert [r.number for r in step.restart] == [2, 2, 2]
    assert decide(s, ts, failures=1).ending.state == JobState.FAILED  # 1 + 1 + 1 >= 3
    for t in ts:
        t.restarts = 2 if t.role == "worker" else 0
    ending = decide(s, ts).ending
    assert ending.state == JobState.FAILED and ending.failure and ending.exit_code == 3
    assert "no retries left (2 of 2 used)" in ending.reason


def test_restart_role_on_a_lost_task_restarts_the_job():
    s = _restart_role_spec()
    ending = decide(s, tasks(ps="R", worker="RLR")).ending
    assert ending.state == JobState.QUEUED and ending.infrastructure


def test_task_completed_restart_role_runs_the_role_again_then_succeeds():
    s = _restart_role_spec(max_attempts=2, event="task_completed")
    ts = tasks(ps="R", worker="OOO")
    step = decide(s, ts)
    assert [r.key for r in step.restart] == ["worker-0", "worker-1", "worker-2"]
    for t in ts:
        t.restarts = 1 if t.role == "worker" else 0
    ending = decide(s, ts).ending
    assert ending.state == JobState.SUCCEEDED and "no retries left" in ending.reason
