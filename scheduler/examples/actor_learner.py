"""MARO-style actor/learner reinforcement learning: actors roll out, the learner updates.

The distributed layout of MARO's RL toolkit (``learner`` + ``actor`` components exchanging
experience and policies through a proxy) and of IMPALA (Espeholt et al., ICML 2018), in its
synchronous form:

```
 learner-0 (policy, version v)                  actor-i (its own environment copies)
   |-- policy version v, weights ---------------->|
   |                                              | --episodes rollouts of CartPole
   |<------- experience (states, actions, returns-to-go), episode returns
   | REINFORCE with a normalised-return baseline (Williams 1992) over all actors' experience;
   | v += 1, next round
```

Environment: CartPole (Barto, Sutton & Anderson 1983; the dynamics and limits of Gym's
``CartPole-v1``, episodes capped at ``--max-steps``), written here in numpy so the task image
needs nothing else. Policy: linear softmax over the 4 state variables. The learner prints
each round's mean episode return, writes ``$PASTURE_JOB_DIR/result.json`` and exits 3 when
the last rounds' mean return is below ``--target-return``.

Tasks find each other through the discovery environment (``PASTURE_ROLE_LEARNER_HOSTS``,
``PASTURE_TASK_INDEX``, ``PASTURE_ROLE_ACTOR_REPLICAS``); the protocol is
:mod:`scheduler.examples.wire`. Run as a task: ``python3 -m scheduler.examples.actor_learner``.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time

import numpy as np

from scheduler.examples import wire
from scheduler.examples.gang import DiscoveryError, TaskEnv


class CartPole:
    """Cart-pole balancing (Gym ``CartPole-v1`` dynamics, Euler integration, 0.02 s steps).

    State: ``[x (m), x_dot (m/s), theta (rad), theta_dot (rad/s)]``; actions 0 (push left)
    and 1 (push right) with 10 N; reward 1 per step until the pole leans more than 12 degrees,
    the cart leaves [-2.4, 2.4] m, or ``max_steps`` is reached.
    """

    GRAVITY, MASS_CART, MASS_POLE, HALF_LENGTH, FORCE, TAU = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02
    X_LIMIT, THETA_LIMIT = 2.4, 12 * 2 * np.pi / 360

    def __init__(self, rng: np.random.Generator, max_steps: int = 200) -> None:
        self.rng = rng
        self.max_steps = max_steps
        self.state = np.zeros(4)
        self.steps = 0

    def reset(self) -> np.ndarray:
        """Start an episode near upright; returns the state (4,)."""
        self.state = self.rng.uniform(-0.05, 0.05, size=4)
        self.steps = 0
        return self.state.copy()

    def step(self, action: int) -> tuple[np.ndarray, float, bool]:
        """Apply ``action``; returns ``(state, reward, done)``."""
        x, x_dot, theta, theta_dot = self.state
        force = self.FORCE if action == 1 else -self.FORCE
        total_mass = self.MASS_CART + self.MASS_POLE
        pole_ml = self.MASS_POLE * self.HALF_LENGTH
        cos, sin = np.cos(theta), np.sin(theta)
        temp = (force + pole_ml * theta_dot**2 * sin) / total_mass
        theta_acc = (self.GRAVITY * sin - cos * temp) / (
            self.HALF_LENGTH * (4.0 / 3.0 - self.MASS_POLE * cos**2 / total_mass)
        )
        x_acc = temp - pole_ml * theta_acc * cos / total_mass
        self.state = np.array(
            [
                x + self.TAU * x_dot,
                x_dot + self.TAU * x_acc,
                theta + self.TAU * theta_dot,
                theta_dot + self.TAU * theta_acc,
            ]
        )
        self.steps += 1
        fell = abs(self.state[0]) > self.X_LIMIT or abs(self.state[2]) > self.THETA_LIMIT
        return self.state.copy(), 1.0, bool(fell or self.steps >= self.max_steps)


def policy_probs(weights: np.ndarray, states: np.ndarray) -> np.ndarray:
    """Action probabilities (n, 2) of the linear softmax policy; ``weights`` is (5, 2)
    (4 state weights + a bias row), ``states`` is (n, 4)."""
    logits = states @ weights[:4] + weights[4]
    logits -= logits.max(axis=1, keepdims=True)
    p = np.exp(logits)
    probs: np.ndarray = p / p.sum(axis=1, keepdims=True)
    return probs


def rollout(
    env: CartPole, weights: np.ndarray, episodes: int, gamma: float, rng: np.random.Generator
) -> dict[str, np.ndarray]:
    """Play ``episodes`` episodes with the policy.

    Returns:
        ``states`` (n, 4), ``actions`` (n,), ``returns`` (n,) discounted returns-to-go,
        ``episode_returns`` (episodes,) undiscounted episode returns.
    """
    states: list[np.ndarray] = []
    actions: list[int] = []
    returns: list[float] = []
    episode_returns: list[float] = []
    for _ in range(episodes):
        s = env.reset()
        ep_states, ep_actions, rewards = [], [], []
        done = False
        while not done:
            p = policy_probs(weights, s[None, :])[0]
            a = int(rng.random() < p[1])
            ep_states.append(s)
            ep_actions.append(a)
            s, r, done = env.step(a)
            rewards.append(r)
        g, to_go = 0.0, []
        for r in reversed(rewards):
            g = r + gamma * g
            to_go.append(g)
        states.extend(ep_states)
        actions.extend(ep_actions)
        returns.extend(reversed(to_go))
        episode_returns.append(sum(rewards))
    return {
        "states": np.array(states),
        "actions": np.array(actions, dtype=np.int64),
        "returns": np.array(returns),
        "episode_returns": np.array(episode_returns),
    }


def policy_gradient(
    weights: np.ndarray, states: np.ndarray, actions: np.ndarray, returns: np.ndarray
) -> np.ndarray:
    """REINFORCE gradient (5, 2) of the mean of ``log pi(a|s) * advantage``, the advantage
    being the returns-to-go normalised over the batch (a constant baseline)."""
    adv = (returns - returns.mean()) / (returns.std() + 1e-8)
    p = policy_probs(weights, states)
    d_logits = -p
    d_logits[np.arange(len(actions)), actions] += 1.0
    d_logits *= adv[:, None] / len(actions)
    return np.vstack([states.T @ d_logits, d_logits.sum(axis=0)[None, :]])


def run_learner(env: TaskEnv, args: argparse.Namespace) -> int:
    """Send the policy to every actor each round, learn from their experience.

    Returns:
        Exit code: 0, or 3 when the final mean return is below ``args.target_return``.

    Raises:
        TimeoutError: the actors did not all connect within ``args.timeout`` seconds.
        ConnectionError: an actor went away mid-training.
    """
    n_actors = env.replicas(args.actor_role)
    if n_actors < 1:
        raise DiscoveryError(f"the job has no {args.actor_role!r} tasks to learn from")
    weights = np.zeros((5, 2))
    with wire.listen(env.task_port) as server:
        print(
            f"learner: listening on {env.task_host}:{env.task_port} for {n_actors} actors",
            flush=True,
        )
        conns = wire.accept(server, n_actors, args.timeout)
    for conn in conns:
        conn.settimeout(args.timeout)
        meta, _ = wire.recv(conn)
        print(f"learner: actor-{meta['index']} joined from {meta['host']}", flush=True)
    history: list[float] = []
    started = time.monotonic()
    for version in range(args.rounds):
        for conn in conns:
            wire.send(conn, {"version": version}, weights=weights)
        batches = [wire.recv(conn)[1] for conn in conns]
        states = np.concatenate([b["states"] for b in batches])
        actions = np.concatenate([b["actions"] for b in batches])
        returns = np.concatenate([b["returns"] for b in batches])
        episode_returns = np.concatenate([b["episode_returns"] for b in batches])
        weights = weights + args.lr * policy_gradient(weights, states, actions, returns)
        history.append(float(episode_returns.mean()))
        print(
            f"round {version + 1:3d}/{args.rounds}  policy v{version + 1}  "
            f"{len(episode_returns)} episodes, {len(actions)} steps  "
            f"mean return {history[-1]:.1f}",
            flush=True,
        )
    for conn in conns:
        wire.send(conn, {"done": True})
        conn.close()
    tail = history[-max(1, args.rounds // 5) :]
    final = float(np.mean(tail))
    result = {
        "job": env.job_name,
        "attempt": env.attempt,
        "actors": n_actors,
        "rounds": args.rounds,
        "first_mean_return": round(history[0], 2),
        "final_mean_return": round(final, 2),
        "policy_version": args.rounds,
        "train_seconds": round(time.monotonic() - started, 3),
    }
    print(f"mean return: first round {history[0]:.1f}, last rounds {final:.1f}")
    if env.job_dir:
        os.makedirs(env.job_dir, exist_ok=True)
        path = os.path.join(env.job_dir, "result.json")
        with open(f"{path}.tmp", "w") as f:
            json.dump(result, f, indent=2)
        os.replace(f"{path}.tmp", path)
        print(f"wrote {path}")
    if final < args.target_return:
        print(
            f"final mean return {final:.1f} is below --target-return {args.target_return}",
            file=sys.stderr,
        )
        return 3
    return 0


def run_actor(env: TaskEnv, args: argparse.Namespace) -> int:
    """Roll out the learner's current policy and send back the experience, each round.

    Returns:
        Exit code 0 once the learner says training is done.
    """
    rng = np.random.default_rng(args.seed + env.index)
    cartpole = CartPole(rng, max_steps=args.max_steps)
    address = env.address(args.learner_role, 0)
    print(f"actor-{env.index}: connecting to learner at {address[0]}:{address[1]}", flush=True)
    rounds = 0
    with wire.connect(address, args.timeout) as sock:
        wire.send(sock, {"index": env.index, "host": socket.gethostname()})
        sock.settimeout(args.timeout)
        while True:
            meta, arrays = wire.recv(sock)
            if meta.get("done"):
                break
            batch = rollout(cartpole, arrays["weights"], args.episodes, args.gamma, rng)
            wire.send(sock, {"version": meta["version"]}, **batch)
            rounds += 1
    print(f"actor-{env.index}: done after {rounds} rounds")
    return 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=50, help="policy versions (default 50)")
    p.add_argument("--episodes", type=int, default=8, help="episodes per actor per round")
    p.add_argument("--max-steps", type=int, default=200, help="episode length cap")
    p.add_argument("--lr", type=float, default=5.0, help="policy-gradient step size")
    p.add_argument("--gamma", type=float, default=0.99, help="discount factor")
    p.add_argument("--seed", type=int, default=0, help="actor i uses seed + i")
    p.add_argument(
        "--target-return",
        type=float,
        default=0.0,
        help="the learner exits 3 when the final mean return is below this",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=180.0,
        help="seconds to wait for peers to connect or answer",
    )
    p.add_argument("--learner-role", default="learner", help="role name of the learner")
    p.add_argument("--actor-role", default="actor", help="role name of the actors")
    args = p.parse_args(argv)
    for name in ("rounds", "episodes", "max_steps"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    return args


def main(argv: list[str] | None = None) -> int:
    """Entry point: dispatch on ``PASTURE_TASK_ROLE``; returns the exit code."""
    args = parse_args(argv)
    try:
        env = TaskEnv.from_environ()
        if env.role == args.learner_role:
            return run_learner(env, args)
        if env.role == args.actor_role:
            return run_actor(env, args)
        raise DiscoveryError(
            f"PASTURE_TASK_ROLE={env.role!r}: expected {args.learner_role!r} or {args.actor_role!r}"
        )
    except (DiscoveryError, TimeoutError, ConnectionError) as exc:
        print(f"actor_learner: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
