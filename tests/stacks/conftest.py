"""Fixtures for the stack tests; the mocks and ``build_stack`` live in tests/stacks/mocks.py."""

from __future__ import annotations

import pytest

from tests.stacks.mocks import SSH_KEY


@pytest.fixture
def ssh_key() -> str:
    return SSH_KEY
