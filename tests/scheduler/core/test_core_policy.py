"""Policy is data: its values are validated when it is built, its plugin and queue-order
names against the registries where they are looked up (once, by schedule())."""

from __future__ import annotations

import pytest

from scheduler.core import Backfill, Policy, PreemptionMode, schedule
from scheduler.core.plugins import check_plugin_names
from scheduler.core.presets import PRESETS
from scheduler.core.queue import queue_order
from tests.factories import job, node, snapshot


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"queue_order": "lottery"}, "queue_order"),
        ({"filters": ("schedulable", "telepathy", "resource-fit")}, "filters"),
        ({"filters": ("schedulable",)}, "filters"),
        ({"scorers": (("nope", 1.0),)}, "scorers"),
        ({"scorers": (("best-fit", float("nan")),)}, "scorers"),
        ({"backfill": "conservative"}, "backfill"),
        ({"preemption": ("always",)}, "preemption"),
        ({"las_thresholds": (100.0, 10.0)}, "las_thresholds"),
        ({"aging_per_hour": -1.0}, "aging_per_hour"),
        ({"max_jobs_per_cycle": 0}, "max_jobs_per_cycle"),
        ({"preemption_min_runtime_s": -5.0}, "preemption_min_runtime_s"),
    ],
)
def test_bad_policies_name_the_field_and_the_value(kwargs, field):
    with pytest.raises(ValueError, match=rf"Policy\.{field}: expected .*, got"):
        schedule(snapshot([node("a")], [job("j")]), Policy(**kwargs), 0.0)


def test_strings_are_coerced_to_enums():
    p = Policy(backfill="none", preemption=["vc-reclaim"], filters=["resource-fit"])
    assert p.backfill is Backfill.NONE
    assert p.preemption == (PreemptionMode.VC_RECLAIM,)
    assert p.filters == ("resource-fit",)


def test_every_preset_is_a_valid_policy():
    for name, policy in PRESETS.items():
        assert Policy(**{f: getattr(policy, f) for f in policy.__slots__}) == policy, name
        check_plugin_names(policy.filters, policy.scorers)
        queue_order(policy.queue_order)
