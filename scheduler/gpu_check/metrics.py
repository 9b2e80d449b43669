"""Metric comparison of the GPU check (pure): pasture's /metrics and nvidia-smi per GPU, and
the rise of utilisation under a load."""

from __future__ import annotations

MIB = 1 << 20


def parse_prometheus(text: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """Samples of a Prometheus text exposition: ``{metric: {sorted label pairs: value}}``."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = float(s.value)
    return out


def pasture_gpu_figures(metrics_text: str, node: str) -> dict[int, dict[str, float]]:
    """``{gpu index: {util_percent, memory_used_mib}}`` of ``node`` from ``/metrics``
    (``pasture_gpu_utilisation_ratio``, ``pasture_gpu_memory_used_bytes``)."""
    samples = parse_prometheus(metrics_text)
    out: dict[int, dict[str, float]] = {}
    for metric, key, scale in (
        ("pasture_gpu_utilisation_ratio", "util_percent", 100.0),
        ("pasture_gpu_memory_used_bytes", "memory_used_mib", 1.0 / MIB),
    ):
        for labels, value in samples.get(metric, {}).items():
            d = dict(labels)
            if d.get("node") == node and "gpu" in d:
                out.setdefault(int(d["gpu"]), {})[key] = value * scale
    return out


def parse_nvidia_smi(csv: str) -> dict[int, dict[str, float]]:
    """``nvidia-smi --query-gpu=index,utilization.gpu,memory.used --format=csv,noheader,
    nounits`` as ``{gpu index: {util_percent, memory_used_mib}}``."""
    out: dict[int, dict[str, float]] = {}
    for line in csv.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 3:
            raise ValueError(f"nvidia-smi line {line!r}: expected 'index, util %, MiB'")
        out[int(parts[0])] = {"util_percent": float(parts[1]), "memory_used_mib": float(parts[2])}
    return out


def compare_gpu_metrics(
    pasture: dict[int, dict[str, float]],
    smi: dict[int, dict[str, float]],
    util_tolerance_percent: float = 15.0,
    memory_tolerance_mib: float = 64.0,
) -> list[str]:
    """What differs between pasture's per-GPU figures and nvidia-smi's (taken at about the
    same time); [] when they match.

    Utilisation is NVML's share of the last sample period a kernel ran, so two readings a
    moment apart differ a little: ``util_tolerance_percent`` points. Memory used moves only
    when a process allocates: ``memory_tolerance_mib`` MiB (pasture's used memory is NVML
    v2, what nvidia-smi prints; v1 would be higher by the driver's reservation, 615 MiB on
    an H200).
    """
    problems = []
    if set(pasture) != set(smi):
        problems.append(f"GPUs differ: pasture {sorted(pasture)}, nvidia-smi {sorted(smi)}")
    for i in sorted(set(pasture) & set(smi)):
        p, s = pasture[i], smi[i]
        for key, tol, unit in (
            ("util_percent", util_tolerance_percent, "%"),
            ("memory_used_mib", memory_tolerance_mib, " MiB"),
        ):
            if key not in p:
                problems.append(f"GPU {i}: pasture reports no {key}")
            elif abs(p[key] - s[key]) > tol:
                problems.append(
                    f"GPU {i} {key}: pasture {p[key]:.0f}{unit}, nvidia-smi {s[key]:.0f}{unit}"
                    f" (tolerance {tol:g}{unit})"
                )
    return problems


def utilisation_rise(
    before: dict[int, dict[str, float]],
    during: dict[int, dict[str, float]],
    min_rise_percent: float = 20.0,
) -> tuple[int | None, list[str]]:
    """The GPU whose utilisation rose most between ``before`` (idle, ``{gpu index:
    {util_percent, ...}}``) and ``during`` a load, and the problems: [] when it rose by at
    least ``min_rise_percent`` points. Without this, comparing pasture with nvidia-smi
    proves nothing when the load never ran (idle matches idle, issue 35 item 12)."""
    rises = {
        i: during[i]["util_percent"] - before.get(i, {}).get("util_percent", 0.0)
        for i in during
        if "util_percent" in during[i]
    }
    if not rises:
        return None, ["no GPU utilisation was measured during the load"]
    gpu = max(rises, key=lambda i: rises[i])
    if rises[gpu] < min_rise_percent:
        return gpu, [
            f"utilisation did not rise under load: at most +{rises[gpu]:.0f} points (GPU "
            f"{gpu}), expected >= +{min_rise_percent:g}; the load did not run on a GPU"
        ]
    return gpu, []
