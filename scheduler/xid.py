"""The GPU XID tables: which NVIDIA Xid errors make a GPU unhealthy and which only warn.

The usual operator reading of NVIDIA's "XID Errors" catalogue
(https://docs.nvidia.com/deploy/xid-errors/). A leaf, so that both the agent's GPU health
probe (:mod:`scheduler.agent.gpu_health`, which cordons on a critical XID) and the API's
metrics (:mod:`scheduler.api.metrics`, which counts them) read one table.

``{xid number: what it means}``.
"""

from __future__ import annotations

CRITICAL_XIDS = {
    48: "double-bit ECC error",
    61: "internal micro-controller breakpoint/warning",
    62: "internal micro-controller halt",
    64: "ECC row-remapper recording failure",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
    140: "unrecovered ECC error",
}
WARNING_XIDS = {
    63: "ECC page retirement / row remapping event",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
}
