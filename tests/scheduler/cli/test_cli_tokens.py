"""``pasture admin token create|list|revoke|rotate`` against a real redis-server."""

from __future__ import annotations

import os
import stat

import yaml

from scheduler.cli.output import REJECTED


def test_rotate_list_and_lifetimes(env, cli, tmp_path):
    cfg = tmp_path / "scheduler.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "redis": {"url": env.settings.redis.url},
                "api": {"token_ttl_days": 7, "token_max_ttl_days": 30},
            }
        )
    )
    r = cli("admin", "token", "create", "-c", str(cfg), "--name", "ci", "--role", "admin")
    assert r.exit_code == 0, r.output
    first = r.output.strip()
    info = env.tokens.verify(first)
    assert info.expires - info.created == 7 * 86400
    r = cli(
        "admin", "token", "create", "-c", str(cfg), "--name", "x", "--role", "admin",
        "--ttl-days", "31",
    )  # fmt: skip
    assert r.exit_code == REJECTED and "at most 30 days" in r.output
    out = tmp_path / "ci.token"
    r = cli(
        "admin", "token", "rotate", "ci", "-c", str(cfg), "--ttl-days", "30", "--output", str(out)
    )
    assert r.exit_code == 0, r.output
    assert first not in r.output
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o600
    second = out.read_text().strip()
    assert env.tokens.verify(first) is None
    info = env.tokens.verify(second)
    assert (info.name, info.expires - info.created) == ("ci", 30 * 86400)
    r = cli("admin", "token", "list", "-c", str(cfg))
    assert "ci" in r.output and "expires" in r.output and "UTC" in r.output
    assert second not in r.output and first not in r.output
    assert cli("admin", "token", "rotate", "ghost", "-c", str(cfg)).exit_code == 5
    assert cli("admin", "token", "revoke", "ci", "-c", str(cfg)).exit_code == 0
    assert env.tokens.verify(second) is None
