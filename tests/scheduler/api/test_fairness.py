"""The per-token gate of the API process (scheduler/api/fairness.py): one token's
requests are handled one at a time, other tokens' beside them (issue 32 item 5)."""

from __future__ import annotations

import asyncio

import pytest

from scheduler.api.fairness import TokenGate


def test_one_tokens_requests_wait_for_each_other_not_for_other_tokens():
    gate = TokenGate(1)
    running: dict[str, int] = {"alice": 0, "bob": 0}
    most: dict[str, int] = {"alice": 0, "bob": 0}
    order: list[str] = []

    async def request(token: str, i: int) -> None:
        async with gate.hold(token):
            running[token] += 1
            most[token] = max(most[token], running[token])
            await asyncio.sleep(0.01)
            order.append(f"{token}-{i}")
            running[token] -= 1

    async def main() -> float:
        loop = asyncio.get_running_loop()
        flood = [asyncio.create_task(request("alice", i)) for i in range(20)]
        await asyncio.sleep(0)  # alice's flood is queued first
        t0 = loop.time()
        await request("bob", 0)
        waited = loop.time() - t0
        await asyncio.gather(*flood)
        return waited

    waited = asyncio.run(main())
    assert most == {"alice": 1, "bob": 1}
    assert waited < 0.1, "bob waited behind alice's queue"  # 20 x 10 ms = 200 ms
    assert order.index("bob-0") < 5
    assert order[-1].startswith("alice")
    assert len(gate) == 0  # entries dropped when nobody waits


def test_a_gate_refuses_zero_slots():
    with pytest.raises(ValueError, match="per_token: expected at least 1, got 0"):
        TokenGate(0)
