"""Pulumi program of the ``pasture`` project (``main: stacks/`` in Pulumi.yaml).

Reads the stack config once, builds the platform's component and exports ClusterOutputs:

    Pulumi.<stack>.yaml --config.load()--> StackConfig --platform--> AzureCluster | AksCluster
                                                                     | OnpremCluster
                                          export_cluster_outputs() <-- component.outputs
                                          [Converge: site.yml --limit changed hosts]
"""

# Pulumi runs this directory with the project's venv (Pulumi.yaml: toolchain uv,
# virtualenv .venv; `uv run` syncs it). The venv holds the project as an editable install,
# whose path entry is the checkout, so `stacks.*` and `scheduler.*` import from here and
# from the local commands' `python -m stacks.drain|converge` alike: no PYTHONPATH.

from __future__ import annotations

from stacks.program import run

run()
