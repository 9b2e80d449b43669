"""actor_learner: the environment, and a learner + 2 actors as real processes."""

import json
import re

import numpy as np

from scheduler.examples import actor_learner as al


def test_cartpole_falls_without_control_and_caps_episodes():
    env = al.CartPole(np.random.default_rng(0), max_steps=500)
    env.reset()
    steps, done = 0, False
    while not done:
        _, _, done = env.step(1)  # always push right: the pole falls within a few dozen steps
        steps += 1
    assert 5 < steps < 100
    capped = al.CartPole(np.random.default_rng(0), max_steps=3)
    capped.reset()
    assert [capped.step(0)[2] for _ in range(3)] == [False, False, True]


def test_policy_gradient_moves_probability_towards_better_actions():
    weights = np.zeros((5, 2))
    states = np.ones((4, 4))
    actions = np.array([1, 1, 0, 0])
    returns = np.array([10.0, 10.0, 0.0, 0.0])  # action 1 did better
    new = weights + al.policy_gradient(weights, states, actions, returns)
    assert al.policy_probs(new, states[:1])[0, 1] > 0.5


def test_learner_and_two_actors_improve_the_policy(gang):
    gang.start(
        "scheduler.examples.actor_learner", {"learner": 1, "actor": 2}, ["--target-return", "100"]
    )
    runs = gang.wait(timeout=120)
    assert {k: r.returncode for k, r in runs.items()} == {
        "learner-0": 0,
        "actor-0": 0,
        "actor-1": 0,
    }, runs["learner-0"].output
    m = re.search(
        r"mean return: first round ([\d.]+), last rounds ([\d.]+)", runs["learner-0"].output
    )
    first, last = float(m.group(1)), float(m.group(2))
    assert last >= 100 and last > 3 * first
    result = json.loads((gang.job_dir / "result.json").read_text())
    assert result["actors"] == 2 and result["policy_version"] == 50
    assert "done after 50 rounds" in runs["actor-1"].output
