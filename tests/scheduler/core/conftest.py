"""Hypothesis profile for the core's property tests: modest example counts so that the
whole core suite stays well under a minute on a 2-core machine. Set
HYPOTHESIS_PROFILE=core-thorough for a longer search."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "core",
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=True,
)
settings.register_profile(
    "core-thorough", max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "core"))
