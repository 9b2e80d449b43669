"""Pulumi mocks for the stack programs (see ../shared PULUMI-TESTING.md).

``build_stack(config)`` runs ``stacks.program.run()`` under ``pulumi.runtime.set_mocks``
and returns every registered resource (type, name, inputs with wire names), every
provider call, and the resolved stack outputs (with which of them are secret).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import ipaddress
import json
import runpy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi

PROJECT = "pasture"
STACKS_DIR = Path(__file__).resolve().parents[2] / "stacks"
SSH_KEY = (
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFakeKeyForTestsOnlyxxxxxxxxxxxxxxxxxxxxxx test@pasture"
)
KUBECONFIG = """apiVersion: v1
kind: Config
clusters:
- name: aks
  cluster: {server: "https://aks.example:443"}
contexts:
- name: aks
  context: {cluster: aks, user: clusterUser}
current-context: aks
users:
- name: clusterUser
  user: {token: mock-token}
"""


# Inputs that name an Azure resource explicitly (instead of azure-native's auto-naming).
EXPLICIT_NAMES = {
    "azure-native:containerregistry:Registry": "registryName",
    "azure-native:storage:StorageAccount": "accountName",
}


class RecordingMocks(pulumi.runtime.Mocks):
    """Echo inputs as outputs, plus what Azure/Kubernetes would compute (addresses)."""

    def __init__(self) -> None:
        self.resources: list[pulumi.runtime.MockResourceArgs] = []
        self.calls: list[pulumi.runtime.MockCallArgs] = []
        self._next_ip = ipaddress.ip_address("10.10.1.4")

    def new_resource(self, args: pulumi.runtime.MockResourceArgs):
        self.resources.append(args)
        out: dict[str, Any] = dict(args.inputs)
        if args.typ.startswith("azure-native:"):
            # Azure's name: the explicit one when the program gives it, else the resource's.
            out.setdefault("name", args.inputs.get(EXPLICIT_NAMES.get(args.typ, ""), args.name))
        if args.typ == "azure-native:network:NetworkInterface":
            confs = [dict(c) for c in out.get("ipConfigurations", [])]
            confs[0]["privateIPAddress"] = str(self._next_ip)
            self._next_ip += 1
            out["ipConfigurations"] = confs
        elif args.typ == "azure-native:network:PublicIPAddress":
            out["ipAddress"] = "20.30.40.50"
        elif args.typ == "azure-native:containerservice:ManagedCluster":
            out["identityProfile"] = {
                "kubeletidentity": {"objectId": "kubelet-object-id", "clientId": "c"}
            }
        elif args.typ == "azure-native:containerregistry:Registry":
            out["loginServer"] = f"{args.inputs.get('registryName', args.name).lower()}.azurecr.io"
        elif args.typ == "docker-build:index:Image":
            # What the provider returns after a push: the manifest digest of the image.
            out["digest"] = "sha256:" + hashlib.sha256(args.name.encode()).hexdigest()
        elif args.typ == "command:remote:Command":
            # What hostops.FACTS_SCRIPT prints on the host (the command never runs here),
            # secret as the real provider makes it: every output of a command whose
            # connection holds a secret (the private key) is secret (pulumi-command#256).
            facts = self.host_facts({"name": args.inputs["triggers"][0]})
            out["stdout"] = pulumi.Output.secret(facts_output(facts))
            out["stderr"] = ""
        elif args.typ == "command:local:Command":
            out["stdout"] = ""  # create is empty (drain) or not run under mocks (converge)
            out["stderr"] = ""
        elif args.typ == "kubernetes:core/v1:Service":
            out["status"] = {"loadBalancer": {"ingress": [{"ip": "10.224.0.200"}]}}
        return [f"/mock/{args.typ}/{args.name}", out]

    @staticmethod
    def host_facts(inputs: dict[str, Any]) -> dict[str, Any]:
        """Facts of a simulated host: hosts whose name starts with ``gpu`` have 4 A100s."""
        gpus = 4 if str(inputs.get("name", "")).startswith("gpu") else 0
        return {
            "cpu": 32 if gpus else 8,
            "memory_mib": 257024 if gpus else 32768,
            "gpu_count": gpus,
            "gpu_model": "A100" if gpus else None,
            "gpu_names": ["NVIDIA A100-SXM4-80GB"] * gpus,
            "os": "Debian GNU/Linux 12 (bookworm)",
        }

    def call(self, args: pulumi.runtime.MockCallArgs):
        self.calls.append(args)
        if args.token == "azure-native:containerservice:listManagedClusterUserCredentials":
            value = base64.b64encode(KUBECONFIG.encode()).decode()
            return {"kubeconfigs": [{"name": "clusterUser", "value": value}]}
        if args.token == "azure-native:authorization:getClientConfig":
            return {
                "subscriptionId": "00000000-0000-0000-0000-000000000001",
                "tenantId": "t",
                "objectId": "o",
                "clientId": "c",
            }
        if args.token == "azure-native:containerregistry:listRegistryCredentials":
            return {
                "username": args.args["registryName"],
                "passwords": [{"name": "password", "value": "acr-admin-password"}],
            }
        if args.token == "azure-native:storage:listStorageAccountKeys":
            return {
                "keys": [{"keyName": "key1", "value": "c3RvcmFnZS1rZXk=", "permissions": "FULL"}]
            }
        return {}


def facts_output(facts: dict[str, Any]) -> str:
    """The output of stacks.hostops.FACTS_SCRIPT on a host with these facts."""
    gpus = "".join(f"{n}\n" for n in facts["gpu_names"])
    return (
        f"::cpu\n{facts['cpu']}\n::memory_kib\n{facts['memory_mib'] * 1024}\n"
        f"::os\n{facts['os']}\n::gpus\n{gpus}"
    )


class RecordingMonitor(pulumi.runtime.mocks.MockMonitor):
    """The mock monitor, also recording each registration's options by resource name:
    ``{name: {"urn", "parent", "dependencies", "delete_before_replace"}}`` (what the
    engine would use to order deletes)."""

    def __init__(self, mocks: RecordingMocks) -> None:
        super().__init__(mocks)
        self.options: dict[str, dict[str, Any]] = {}

    def RegisterResource(self, request):  # noqa: N802 (the gRPC method's name)
        response = super().RegisterResource(request)
        self.options[request.name] = {
            "urn": response.urn,
            "type": request.type,
            "parent": request.parent,
            "dependencies": list(request.dependencies),
            "delete_before_replace": request.deleteBeforeReplace,
        }
        return response


@dataclass
class Built:
    """A stack built under mocks."""

    mocks: RecordingMocks
    monitor: RecordingMonitor | None = None
    outputs: dict[str, Any] = field(default_factory=dict)
    secret_outputs: set[str] = field(default_factory=set)

    def of_type(self, typ: str) -> list[pulumi.runtime.MockResourceArgs]:
        return [r for r in self.mocks.resources if r.typ == typ]

    def named(self, name: str) -> pulumi.runtime.MockResourceArgs:
        (res,) = [r for r in self.mocks.resources if r.name == name]
        return res


def build_stack(
    config: dict[str, Any], secrets: dict[str, str] | None = None, *, as_pulumi: bool = False
) -> Built:
    """Run the pasture program with ``config`` (camelCase keys; lists/dicts as JSON).

    ``as_pulumi`` runs the ``stacks/`` directory the way Pulumi's Python host does
    (``runpy.run_path``), instead of calling ``stacks.program.run()``."""
    from stacks import program

    mocks = RecordingMocks()
    # Pulumi's mocks run on the thread's current event loop; tests that ran before in the
    # same process (asyncio.run, anyio) leave none set, so give each build a fresh one.
    asyncio.set_event_loop(asyncio.new_event_loop())
    monitor = RecordingMonitor(mocks)
    pulumi.runtime.set_mocks(mocks, project=PROJECT, stack="test", preview=False, monitor=monitor)
    all_config = {
        f"{PROJECT}:{k}": v if isinstance(v, str) else json.dumps(v) for k, v in config.items()
    }
    secrets = secrets or {}
    all_config.update({f"{PROJECT}:{k}": v for k, v in secrets.items()})
    pulumi.runtime.set_all_config(all_config, [f"{PROJECT}:{k}" for k in secrets])
    built = Built(mocks, monitor)
    exports: dict[str, pulumi.Output[Any]] = {}
    original = pulumi.export
    pulumi.export = lambda name, value: exports.__setitem__(name, pulumi.Output.from_input(value))

    @pulumi.runtime.test
    def run():
        if as_pulumi:
            runpy.run_path(str(STACKS_DIR), run_name="__main__")
        else:
            program.run()
        names = list(exports)

        def record(values):
            built.outputs.update(zip(names, values, strict=True))

        async def secrets_of() -> bool:
            for n in names:
                if await exports[n].is_secret():
                    built.secret_outputs.add(n)
            return True

        checked = pulumi.Output.from_input(asyncio.ensure_future(secrets_of()))
        return pulumi.Output.all(checked, *[exports[n] for n in names]).apply(
            lambda vals: record(vals[1:])
        )

    try:
        run()
    finally:
        pulumi.export = original
    return built
