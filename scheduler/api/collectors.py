"""The collectors behind ``/metrics``: what the store says at scrape time (prometheus-client
custom collectors, registered on the app's registry by :mod:`scheduler.api.app`).

- :class:`ClusterCollector`: ``pasture_jobs{state}``, ``pasture_nodes{state}``, the cluster
  condition (from the cluster status summary).
- :class:`SchedulerCollector`: queue length per VC, pending reasons, cycle latency,
  placements, preemptions, GPUs per node and VC, heartbeat age, utilisation
  (docs/dashboard.md).
- :class:`HealthCollector`: operations health for the alerting rules (store up, node state /
  cordon reason, per-GPU health, oldest pending job per VC, API certificate expiry;
  docs/operations.md).

Series labelled with a job use :data:`scheduler.api.visibility.JOB_LABEL`; what one caller
may see of them is :class:`scheduler.api.visibility.VisibleMetrics`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from scheduler.api.visibility import JOB_LABEL
from scheduler.xid import CRITICAL_XIDS

if TYPE_CHECKING:
    from scheduler.store.records import Allocation, JobRecord, NodeRecord, VCUsage
    from scheduler.store.store import Store

log = logging.getLogger(__name__)


class ClusterCollector:
    """Collects job and node counts by state from ``status()`` at each scrape."""

    def __init__(self, status: Callable[[], dict[str, Any]]) -> None:
        self._status = status

    def collect(self) -> Iterator[Metric]:
        try:
            status = self._status()
        except Exception:  # a scrape must not fail because Redis blinked
            log.exception("cluster status for /metrics failed")
            return
        for key, name, doc in (
            ("jobs", "pasture_jobs", "Jobs by state."),
            ("nodes", "pasture_nodes", "Nodes by state."),
        ):
            counts = status.get(key)
            if isinstance(counts, dict):
                family = GaugeMetricFamily(name, doc, labels=["state"])
                for state, n in sorted(counts.items()):
                    if isinstance(n, int | float):
                        family.add_metric([str(state)], n)
                yield family
        cond = status.get("condition")
        family = GaugeMetricFamily(
            "pasture_cluster_condition",
            "1 while the loop reports the cluster condition of this kind (disruption: most "
            "nodes silent at once, none declared lost; docs/faults.md), else 0.",
            labels=["kind"],
        )
        active = isinstance(cond, dict) and cond.get("kind") == "disruption"
        family.add_metric(["disruption"], 1 if active else 0)
        yield family


class SchedulerCollector:
    """Scheduler metrics computed from the store at each scrape (the loop and agents are
    other processes; what only the loop knows it writes to the store: the commit script
    counts placements and preemptions, :meth:`Store.record_cycle` the cycle latency).

    - ``pasture_queue_length{vc}``                 jobs submitted or queued
    - ``pasture_pending_jobs{kind}``               queued jobs by pending-reason kind
    - ``pasture_placements_total``, ``pasture_preemptions_total``   counters
    - ``pasture_scheduling_cycle_seconds``         histogram (seconds)
    - ``pasture_node_gpu_capacity{node}``, ``pasture_node_gpus_allocated{node}``,
      ``pasture_node_gpus_idle{node}``
    - ``pasture_vc_gpu_guarantee{vc}``, ``pasture_vc_gpus_allocated{vc}``,
      ``pasture_vc_gpus_borrowed{vc}``
    - ``pasture_node_heartbeat_age_seconds{node}`` seconds since the last heartbeat
    - ``pasture_node_{cpu,memory,gpu}_utilisation_ratio{node}`` 0-1, last report
    - ``pasture_gpu_utilisation_ratio{node, gpu, job_name, task, vc}`` (0-1),
      ``pasture_gpu_memory_used_bytes{...}``, ``pasture_gpu_memory_capacity_bytes{...}``:
      per GPU, as NVML measured it, labelled with the job, task and VC holding the GPU
      ("" when free)
    - ``pasture_task_cpu_cores{job_name, task, vc, node}``,
      ``pasture_task_memory_rss_bytes{...}``,
      ``pasture_task_gpu_utilisation_ratio{..., gpu}``,
      ``pasture_task_gpu_memory_used_bytes{..., gpu}``: each running task's processes and
      GPUs, from its agent's last usage sample (:mod:`scheduler.agent.taskusage`; none when
      older than 30 s)

    docs/dashboard.md lists the names these replaced.
    """

    def __init__(self, store: Store) -> None:
        self._store = store

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily

        store = self._store
        try:
            now = store.now()
            nodes = store.list_nodes()
            ledger = store.ledger()
            vcs = store.vc_usage()
            active = store.active_jobs(with_spec=False)
            stats = store.loop_stats()
            buckets, count, total = store.cycle_histogram()
            latest = store.latest_usage_samples([n.name for n in nodes])
        except Exception:  # a scrape must not fail because Redis blinked
            log.exception("scheduler metrics for /metrics failed")
            return
        queue = GaugeMetricFamily(
            "pasture_queue_length", "Jobs waiting (submitted or queued) by VC.", labels=["vc"]
        )
        waiting: dict[str, int] = {v.name: 0 for v in vcs}
        kinds: dict[str, int] = {}
        for j in active:
            if j.state in ("submitted", "queued"):
                waiting[j.vc] = waiting.get(j.vc, 0) + 1
                kind = (j.pending_reason or {}).get("kind") or "none"
                kinds[kind] = kinds.get(kind, 0) + 1
        for vc, n in sorted(waiting.items()):
            queue.add_metric([vc], n)
        yield queue
        pending = GaugeMetricFamily(
            "pasture_pending_jobs", "Waiting jobs by pending-reason kind.", labels=["kind"]
        )
        for kind, n in sorted(kinds.items()):
            pending.add_metric([kind], n)
        yield pending
        yield CounterMetricFamily(
            "pasture_placements",
            "Jobs placed (gangs bound) by the loop.",
            value=stats.get("placements", 0),
        )
        yield CounterMetricFamily(
            "pasture_preemptions", "Jobs preempted by the loop.", value=stats.get("preemptions", 0)
        )
        yield HistogramMetricFamily(
            "pasture_scheduling_cycle_seconds",
            "Scheduling loop cycle latency in seconds.",
            buckets=[(repr(b), c) for b, c in buckets] + [("+Inf", count)],
            sum_value=total,
        )
        jobs = {j.name: j for j in active}
        yield from node_gpu_families(nodes, ledger, now, jobs)
        yield from task_usage_families(latest, jobs, now)
        yield from vc_gpu_families(vcs)


def node_gpu_families(
    nodes: Iterable[NodeRecord],
    ledger: dict[str, Allocation],
    now: float,
    jobs: Mapping[str, JobRecord] | None = None,
) -> Iterator[Metric]:
    """Per-node GPU counts, heartbeat age, utilisation ratios and per-GPU samples.

    ``jobs``: ``{name: JobRecord}`` of the active jobs (their VC labels the per-GPU series
    of the GPUs the ledger gives their tasks: ``job_name``, ``task``, ``vc``; "" when the
    GPU is free).

    Totals and their parts are separate metrics, so ``sum()`` over any label is safe:
    ``pasture_node_gpu_capacity`` (what the node has) vs ``pasture_node_gpus_allocated`` and
    ``pasture_node_gpus_idle`` (free on a ``ready`` node). Ratios are 0-1. Per-GPU series come
    only from what NVML measured (the agent's ``usage["gpus"]``); a GPU without a sample (the
    dev cluster's fake GPUs) has no series rather than a made-up 0.
    """
    alloc: dict[str, int] = {}
    holder: dict[tuple[str, int], list[str]] = {}  # (node, gpu) -> [job, task, vc]
    for a in ledger.values():
        alloc[a.node] = alloc.get(a.node, 0) + a.gpu
        vc = getattr((jobs or {}).get(a.job), "vc", "")
        for g in a.gpus or []:
            holder[(a.node, int(g))] = [a.job, f"{a.role}-{a.index}", vc]

    def family(name: str, doc: str, *labels: str) -> GaugeMetricFamily:
        return GaugeMetricFamily(name, doc, labels=["node", *labels])

    capacity = family("pasture_node_gpu_capacity", "GPUs the node has (lost nodes included).")
    allocated = family("pasture_node_gpus_allocated", "GPUs of the node allocated to tasks.")
    idle = family("pasture_node_gpus_idle", "Free GPUs on a ready node (0 when not ready).")
    age = family("pasture_node_heartbeat_age_seconds", "Seconds since the node's last heartbeat.")
    ratio = {
        "cpu": family("pasture_node_cpu_utilisation_ratio", "CPU busy, 0-1 (last report)."),
        "memory": family(
            "pasture_node_memory_utilisation_ratio", "Memory used / total, 0-1 (last report)."
        ),
        "gpu": family(
            "pasture_node_gpu_utilisation_ratio",
            "Mean utilisation of the node's measured GPUs, 0-1 (last report).",
        ),
    }
    held = ("gpu", JOB_LABEL, "task", "vc")
    gpu_util = family(
        "pasture_gpu_utilisation_ratio",
        "Share of the last sample period a kernel ran on the GPU (NVML), 0-1; job_name, "
        "task, vc: who holds the GPU ('' when free).",
        *held,
    )
    gpu_used = family("pasture_gpu_memory_used_bytes", "GPU memory in use (NVML), bytes.", *held)
    gpu_size = family("pasture_gpu_memory_capacity_bytes", "GPU memory size (NVML), bytes.", *held)
    for n in nodes:
        used = alloc.get(n.name, 0)
        capacity.add_metric([n.name], n.gpu)
        allocated.add_metric([n.name], used)
        idle.add_metric([n.name], max(0, n.gpu - used) if n.state == "ready" else 0)
        age.add_metric([n.name], max(0.0, now - n.heartbeat))
        u = n.usage or {}
        if u.get("cpu_percent") is not None:
            ratio["cpu"].add_metric([n.name], float(u["cpu_percent"]) / 100.0)
        if u.get("memory_total"):
            ratio["memory"].add_metric(
                [n.name], float(u.get("memory_used") or 0) / float(u["memory_total"])
            )
        measured = []
        for g in u.get("gpus") or []:
            if not isinstance(g, dict) or g.get("index") is None:
                continue
            who = holder.get((n.name, int(g["index"])), ["", "", ""])
            labels = [n.name, str(g["index"]), *who]
            if isinstance(g.get("util_percent"), int | float):
                gpu_util.add_metric(labels, float(g["util_percent"]) / 100.0)
                measured.append(float(g["util_percent"]) / 100.0)
            if isinstance(g.get("memory_used"), int | float):
                gpu_used.add_metric(labels, float(g["memory_used"]))
            if isinstance(g.get("memory_total"), int | float):
                gpu_size.add_metric(labels, float(g["memory_total"]))
        if measured:
            ratio["gpu"].add_metric([n.name], sum(measured) / len(measured))
    yield from (capacity, allocated, idle, age, *ratio.values(), gpu_util, gpu_used, gpu_size)


def task_usage_families(
    latest: Mapping[str, Any],
    jobs: Mapping[str, JobRecord],
    now: float,
    max_age_s: float = 30.0,
) -> Iterator[Metric]:
    """Per-task series from each node's latest usage sample (``{node: sample}``,
    :func:`scheduler.store.nodes.usage_sample`), for tasks of active jobs whose uid matches
    the sample's (a deleted job's last figures never show under a new job of its name)
    and samples at most ``max_age_s`` old."""
    labels = [JOB_LABEL, "task", "vc", "node"]
    cpu = GaugeMetricFamily(
        "pasture_task_cpu_cores", "CPU cores the task's processes use (psutil).", labels=labels
    )
    rss = GaugeMetricFamily(
        "pasture_task_memory_rss_bytes",
        "Resident memory of the task's processes, bytes (psutil, summed).",
        labels=labels,
    )
    util = GaugeMetricFamily(
        "pasture_task_gpu_utilisation_ratio",
        "Utilisation of a GPU the task holds (NVML), 0-1.",
        labels=[*labels, "gpu"],
    )
    gmem = GaugeMetricFamily(
        "pasture_task_gpu_memory_used_bytes",
        "Memory in use on a GPU the task holds (NVML), bytes.",
        labels=[*labels, "gpu"],
    )
    for node, sample in sorted((latest or {}).items()):
        if not isinstance(sample, dict) or now - float(sample.get("t") or 0) > max_age_s:
            continue
        tasks = sample.get("tasks")
        for key, e in sorted(tasks.items() if isinstance(tasks, dict) else []):
            uid, _, task = key.partition("/")
            job = jobs.get(e.get("job", "")) if isinstance(e, dict) else None
            if job is None or job.uid != uid:
                continue
            row = [job.name, task, job.vc, node]
            if isinstance(e.get("cpu"), int | float):
                cpu.add_metric(row, float(e["cpu"]))
            if isinstance(e.get("rss"), int | float):
                rss.add_metric(row, float(e["rss"]))
            gpus = e.get("gpus")
            for g in gpus if isinstance(gpus, list) else []:
                if not (isinstance(g, list) and len(g) == 3):
                    continue
                if isinstance(g[1], int | float):
                    util.add_metric([*row, str(g[0])], float(g[1]) / 100.0)
                if isinstance(g[2], int | float):
                    gmem.add_metric([*row, str(g[0])], float(g[2]))
    yield from (cpu, rss, util, gmem)


def vc_gpu_families(vcs: Iterable[VCUsage]) -> Iterator[Metric]:
    """Per-VC GPUs: ``pasture_vc_gpu_guarantee``, ``pasture_vc_gpus_allocated`` and
    ``pasture_vc_gpus_borrowed`` (the part of allocated above the guarantee), each its own
    metric so that no ``sum()`` adds a guarantee to an allocation."""
    out = {
        "guarantee": GaugeMetricFamily(
            "pasture_vc_gpu_guarantee", "GPUs guaranteed to the VC.", labels=["vc"]
        ),
        "used": GaugeMetricFamily(
            "pasture_vc_gpus_allocated", "GPUs allocated to the VC's tasks.", labels=["vc"]
        ),
        "borrowed": GaugeMetricFamily(
            "pasture_vc_gpus_borrowed",
            "GPUs the VC holds above its guarantee (part of allocated).",
            labels=["vc"],
        ),
    }
    for v in vcs:
        for key, fam in out.items():
            fam.add_metric([v.name], (getattr(v, key) or {}).get("gpu", 0))
    yield from out.values()


# ---- operations health (issue 19; the alerting rules in roles/prometheus use these) -------
class HealthCollector:
    """Metrics the alerting rules need (roles/prometheus/files/pasture-alerts.yml,
    docs/operations.md), computed at each scrape:

    - ``pasture_store_up``                           1 when Redis answers a PING, else 0
    - ``pasture_node_state{node, state}``            1 for the node's state, 0 for the others
    - ``pasture_node_cordoned{node, reason}``        1 while cordoned; reason ``gpu_health``
      (the agent's GPU probe) or ``operator``
    - ``pasture_gpu_healthy{node, gpu}``             1 healthy / 0 unhealthy (agent's NVML probe)
    - ``pasture_gpu_temperature_celsius{node, gpu}``, ``pasture_gpu_power_watts{node, gpu}``,
      ``pasture_gpu_ecc_uncorrected_errors{node, gpu}`` (volatile count),
      ``pasture_gpu_critical_xids{node, gpu}`` (critical XIDs seen since the agent started)
    - ``pasture_vc_oldest_pending_seconds{vc}``      seconds the VC's longest-waiting job has
      been waiting (since it entered submitted / queued)
    - ``pasture_api_certificate_expiry_timestamp_seconds``  notAfter of ``api.tls_cert``
      (Unix seconds; absent without TLS)

    Args:
        store: the Redis store. tls_cert: the API's certificate file, or None.
    """

    def __init__(self, store: Store, tls_cert: str | Path | None = None) -> None:
        self._store = store
        self._tls_cert = tls_cert

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily("pasture_store_up", "1 when Redis answers a PING, else 0.")
        try:
            self._store.r.ping()
            up.add_metric([], 1)
        except Exception:  # noqa: BLE001 - that is what this metric reports
            up.add_metric([], 0)
            yield up
            yield from self._certificate()
            return
        yield up
        try:
            now = self._store.now()
            nodes = self._store.list_nodes()
            active = self._store.active_jobs(with_spec=False)
        except Exception:  # a scrape must not fail because Redis blinked
            log.exception("health metrics for /metrics failed")
            return
        yield from self._nodes(nodes)
        yield from self._gpus(nodes)
        oldest = GaugeMetricFamily(
            "pasture_vc_oldest_pending_seconds",
            "Seconds the VC's longest-waiting job has waited in submitted/queued.",
            labels=["vc"],
        )
        waits: dict[str, float] = {}
        for j in active:
            if j.state in ("submitted", "queued"):
                since = j.updated or j.created
                waits[j.vc] = max(waits.get(j.vc, 0.0), max(0.0, now - since))
        for vc, s in sorted(waits.items()):
            oldest.add_metric([vc], s)
        yield oldest
        yield from self._certificate()

    @staticmethod
    def _nodes(nodes: Iterable[NodeRecord]) -> Iterator[Metric]:
        from scheduler.store.store import NODE_STATES

        state = GaugeMetricFamily(
            "pasture_node_state", "1 for the node's state, 0 otherwise.", labels=["node", "state"]
        )
        cordoned = GaugeMetricFamily(
            "pasture_node_cordoned",
            "1 while the node is cordoned, by reason (gpu_health or operator).",
            labels=["node", "reason"],
        )
        for n in nodes:
            for s in NODE_STATES:
                state.add_metric([n.name, s], 1 if n.state == s else 0)
            if n.state == "cordoned":
                auto = (n.state_reason or "").startswith("cordoned by the GPU health probe")
                cordoned.add_metric([n.name, "gpu_health" if auto else "operator"], 1)
        yield state
        yield cordoned

    @staticmethod
    def _gpus(nodes: Iterable[NodeRecord]) -> Iterator[Metric]:
        fams = {
            key: GaugeMetricFamily(name, doc, labels=["node", "gpu"])
            for key, name, doc in (
                ("healthy", "pasture_gpu_healthy", "1 healthy, 0 unhealthy (NVML probe)."),
                ("temperature_c", "pasture_gpu_temperature_celsius", "GPU temperature, C."),
                ("power_w", "pasture_gpu_power_watts", "GPU power draw, W."),
                (
                    "ecc_uncorrected",
                    "pasture_gpu_ecc_uncorrected_errors",
                    "Volatile uncorrected ECC errors.",
                ),
                ("xids", "pasture_gpu_critical_xids", "Critical XIDs since the agent started."),
            )
        }
        for n in nodes:
            for g in (n.usage or {}).get("gpu_health") or []:
                if not isinstance(g, dict):
                    continue
                labels = [n.name, str(g.get("index"))]
                fams["healthy"].add_metric(labels, 1 if g.get("healthy", True) else 0)
                fams["xids"].add_metric(
                    labels, sum(1 for x in g.get("xids") or [] if x in CRITICAL_XIDS)
                )
                for key in ("temperature_c", "power_w", "ecc_uncorrected"):
                    if isinstance(g.get(key), int | float):
                        fams[key].add_metric(labels, float(g[key]))
        yield from fams.values()

    def _certificate(self) -> Iterator[Metric]:
        if not self._tls_cert:
            return
        try:
            # cryptography comes with paramiko (a runtime dependency)
            from cryptography import x509

            with open(self._tls_cert, "rb") as f:
                cert = x509.load_pem_x509_certificate(f.read())
        except Exception:  # noqa: BLE001 - an unreadable certificate is logged, not fatal
            log.exception("cannot read the API certificate %s", self._tls_cert)
            return
        yield GaugeMetricFamily(
            "pasture_api_certificate_expiry_timestamp_seconds",
            "When the API's TLS certificate expires (notAfter), Unix seconds.",
            value=cert.not_valid_after_utc.timestamp(),
        )
