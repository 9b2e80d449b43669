"""Pulumi program of the ``pasture`` project (``main: stacks/`` in Pulumi.yaml).

Reads the stack config once, builds the platform's component and exports ClusterOutputs:

    Pulumi.<stack>.yaml --config.load()--> StackConfig --platform--> AzureCluster | AksCluster
                                                                     | OnpremCluster
                                          export_cluster_outputs() <-- component.outputs
                                          [Converge: site.yml --limit changed hosts]
"""

from __future__ import annotations

import sys
from pathlib import Path

# Pulumi runs this directory as a script; make `stacks.*` and `scheduler.*` importable
# (and importable again by the dynamic providers, which dill pickles by reference).
_ROOT = str(Path(__file__).resolve().parent.parent)
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from stacks.program import run  # noqa: E402

run()
