"""Response models of the usage routes (:mod:`scheduler.api.routers.usage`); pydantic
only, so the CLI parses the answers without loading the API."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class TaskPointOut(BaseModel):
    model_config = ConfigDict(extra="allow")
    t: float = Field(description="s since the epoch")
    cpu_cores: float | None = Field(None, description="cores busy (1.0 = one core)")
    memory_rss: int | None = Field(None, description="bytes, sum of its processes' RSS")
    gpu_util: float | None = Field(None, description="percent, mean over its GPUs")
    gpu_memory_used: int | None = Field(None, description="bytes, sum over its GPUs")
    node: str = Field("", description="the node the sample was taken on")
    attempt: int | None = Field(None, description="the job's attempt it was taken in")


class AttemptUsageOut(BaseModel):
    attempt: int | None = None
    node: str = ""
    cpu_s: float | None = Field(None, description="CPU seconds (user + system)")
    max_rss: int | None = Field(None, description="bytes, peak resident memory")
    final: bool = Field(False, description="recorded at the task's end (else: so far)")


class TaskGpuOut(BaseModel):
    index: int
    util_percent: float | None = None
    memory_used: float | None = Field(None, description="bytes")


class TaskUsageOut(BaseModel):
    model_config = ConfigDict(extra="allow")
    task: str = Field(description="<role>-<index>")
    node: str = Field(description="the node of its latest sample (or its node now)")
    attempt: int | None = None
    cpu_request: float = Field(description="cores")
    memory_request: int = Field(description="bytes")
    gpu_request: int = 0
    latest: TaskPointOut | None = Field(None, description="None: no sample in the last 30 s")
    gpus: list[TaskGpuOut] = []
    samples: list[TaskPointOut] = Field([], description="every node and attempt, oldest first")
    cpu_time_s: float | None = Field(None, description="CPU seconds over all its attempts")
    max_rss: int | None = Field(None, description="bytes, the peak of any attempt")
    attempts: list[AttemptUsageOut] = []


class JobUsageTotalsOut(BaseModel):
    cpu_cores: float | None = None
    memory_rss: int | None = None
    gpu_memory_used: int | None = None
    gpu_util: float | None = None
    gpus: int = Field(0, description="GPUs the tasks with a latest sample hold (a count)")
    cpu_time_s: float | None = Field(None, description="CPU seconds of all tasks, all attempts")
    max_rss: int | None = Field(None, description="bytes, the largest task's peak")


class JobUsageOut(BaseModel):
    """``GET /api/v1/jobs/{name}/usage``."""

    job: str
    uid: str
    vc: str
    state: str
    now: float
    window_s: int
    tasks: list[TaskUsageOut]
    totals: JobUsageTotalsOut


class JobGpuTimeOut(BaseModel):
    name: str
    uid: str
    user: str
    vc: str
    gpus: int
    cores: float = Field(0.0, description="CPU cores it asks for (all its tasks)")
    seconds: float
    gpu_hours: float
    core_hours: float = Field(0.0, description="allocated CPU core-hours")


class GpuHoursRowOut(BaseModel):
    key: str = Field(description="the user or VC")
    gpu_hours: float
    core_hours: float = 0.0
    jobs: list[JobGpuTimeOut]


class GpuHoursOut(BaseModel):
    """``GET /api/v1/usage/gpu-hours``."""

    since: float
    until: float
    by: Literal["user", "vc"]
    rows: list[GpuHoursRowOut]
    total: float = Field(description="GPU-hours")
    total_core_hours: float = 0.0
