"""hello_gang as three real processes on 127.0.0.1."""

from scheduler.examples import hello_gang


def test_ps_and_two_workers_greet_each_other(gang):
    gang.start("scheduler.examples.hello_gang", {"ps": 1, "worker": 2})
    runs = gang.wait(timeout=60)
    assert {k: r.returncode for k, r in runs.items()} == {"ps-0": 0, "worker-0": 0, "worker-1": 0}
    assert "the gang of 3 is complete" in runs["ps-0"].output
    assert "hello from worker-0@" in runs["ps-0"].output
    assert "hello from worker-1@" in runs["ps-0"].output
    for w in ("worker-0", "worker-1"):
        assert "ps-0 answered; it heard from 2 peers" in runs[w].output


def test_worker_without_a_ps_fails_with_the_reason(gang):
    gang.start(
        "scheduler.examples.hello_gang",
        {"ps": 1, "worker": 1},
        ["--timeout", "1"],
        only={"worker-0"},
    )
    run = gang.wait(timeout=30)["worker-0"]
    assert run.returncode == 1
    assert "could not connect to 127.0.0.1:" in run.output


def test_without_discovery_env_it_says_what_is_missing(monkeypatch, capsys):
    for var in ("PASTURE_ROLES", "PASTURE_TASK_ROLE"):
        monkeypatch.delenv(var, raising=False)
    assert hello_gang.main([]) == 1
    assert "PASTURE_ROLES is not set" in capsys.readouterr().err
