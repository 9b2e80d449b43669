"""Policies of the azure stack (VMs), checked on the resources it registers under mocks."""

from __future__ import annotations

import base64

import pytest
from inventory_checks import check_inventory

from scheduler.inventory import parse_stack_output
from stacks.config import ConfigError
from tests.stacks.mocks import SSH_KEY, build_stack

pytestmark = pytest.mark.stacks

VM = "azure-native:compute:VirtualMachine"
NIC = "azure-native:network:NetworkInterface"
NSG = "azure-native:network:NetworkSecurityGroup"


def azure_config(gpu_count: int, **extra) -> dict:
    return {
        "platform": "azure",
        "clusterName": "dev",
        "sshPublicKey": SSH_KEY,
        "nodePools": [
            {
                "name": "cpu",
                "vm_size": "Standard_D4s_v5",
                "count": 1,
                "cpu": 4,
                "memory_mib": 16384,
            },
            {
                "name": "gpu",
                "vm_size": "Standard_NC24ads_A100_v4",
                "count": gpu_count,
                "spot": True,
                "spot_eviction_policy": "Deallocate",
                "cpu": 24,
                "memory_mib": 225280,
                "gpu_count": 1,
                "gpu_model": "A100",
                "labels": {"tier": "a100"},
            },
        ],
        **extra,
    }


@pytest.fixture(scope="module")
def by_count():
    """One build per GPU pool size (0, 1, 5); built once for the module."""
    return {n: build_stack(azure_config(n)) for n in (0, 1, 5)}


@pytest.fixture(scope="module")
def exposed():
    """A build with a public master IP and an allowed CIDR."""
    return build_stack(
        azure_config(2, masterPublicIp=True, allowedCidrs=["20.61.0.0/24", "2a01:110::/32"])
    )


def vm_names(built) -> list[str]:
    return sorted(r.inputs["vmName"] for r in built.of_type(VM))


@pytest.mark.parametrize("count", [0, 1, 5])
def test_node_count_per_pool_follows_config(by_count, count):
    built = by_count[count]
    gpu_vms = [r for r in built.of_type(VM) if r.inputs["tags"].get("pasture-pool") == "gpu"]
    cpu_vms = [r for r in built.of_type(VM) if r.inputs["tags"].get("pasture-pool") == "cpu"]
    assert len(gpu_vms) == count
    assert len(cpu_vms) == 1
    assert sorted(r.inputs["vmName"] for r in gpu_vms) == [f"gpu-{i}" for i in range(count)]
    assert len(built.of_type(NIC)) == count + 2  # + cpu-0 + master
    assert [n["name"] for n in built.outputs["nodes"]] == ["cpu-0"] + [
        f"gpu-{i}" for i in range(count)
    ]


def test_changing_a_count_keeps_existing_vm_names_and_inputs(by_count):
    small, big = by_count[1], by_count[5]
    assert set(vm_names(small)) <= set(vm_names(big))
    assert set(vm_names(big)) - set(vm_names(small)) == {"gpu-1", "gpu-2", "gpu-3", "gpu-4"}
    # Same Pulumi resource names and inputs for the VMs that stay: nothing is replaced.
    for res in small.of_type(VM):
        assert big.named(res.name).inputs == res.inputs
    # Lowering to 0 removes only the pool's VMs.
    assert vm_names(by_count[0]) == ["cpu-0", "master"]


def test_no_nsg_rule_admits_anything_from_outside_by_default(by_count):
    for built in by_count.values():
        (nsg,) = built.of_type(NSG)
        assert nsg.inputs.get("securityRules", []) == []


def test_nsg_admits_only_configured_cidrs_on_ssh_and_api_port(exposed):
    (nsg,) = exposed.of_type(NSG)
    rules = nsg.inputs["securityRules"]
    sources = sorted(r["sourceAddressPrefix"] for r in rules)
    assert sources == ["20.61.0.0/24", "2a01:110::/32"]
    for rule in rules:
        assert rule["access"] == "Allow" and rule["direction"] == "Inbound"
        assert rule["sourceAddressPrefix"] not in ("0.0.0.0/0", "*", "Internet", "::/0")
        assert sorted(rule["destinationPortRanges"]) == ["22", "8443"]
    # the subnet carries the NSG
    (subnet,) = exposed.of_type("azure-native:network:Subnet")
    assert subnet.inputs["networkSecurityGroup"]["id"].endswith("/dev-nsg")


def test_no_vm_has_password_auth_and_every_vm_gets_the_key_and_python(by_count, exposed):
    for built in [*by_count.values(), exposed]:
        for vm in built.of_type(VM):
            profile = vm.inputs["osProfile"]
            assert "adminPassword" not in profile
            linux = profile["linuxConfiguration"]
            assert linux["disablePasswordAuthentication"] is True
            (key,) = linux["ssh"]["publicKeys"]
            assert key["keyData"] == SSH_KEY
            assert key["path"] == f"/home/{profile['adminUsername']}/.ssh/authorized_keys"
            cloud_init = base64.b64decode(profile["customData"]).decode()
            assert cloud_init.startswith("#cloud-config") and "python3" in cloud_init


def test_spot_pool_gets_spot_priority_and_eviction_policy(by_count):
    for vm in by_count[5].of_type(VM):
        if vm.inputs["tags"].get("pasture-pool") == "gpu":
            assert vm.inputs["priority"] == "Spot"
            assert vm.inputs["evictionPolicy"] == "Deallocate"
            assert vm.inputs["billingProfile"]["maxPrice"] == -1
        else:
            assert "priority" not in vm.inputs


def test_master_public_ip_is_optional(by_count, exposed):
    assert by_count[1].of_type("azure-native:network:PublicIPAddress") == []
    assert by_count[1].outputs["master"]["ssh_host"] is None
    (pip,) = exposed.of_type("azure-native:network:PublicIPAddress")
    master_nic = exposed.named("dev-master-nic")
    assert master_nic.inputs["ipConfigurations"][0]["publicIPAddress"]["id"].endswith(
        "/dev-master-pip"
    )
    assert exposed.outputs["master"]["ssh_host"] == "20.30.40.50"


def test_outputs_match_the_contract(by_count):
    built = by_count[5]
    outputs = parse_stack_output(built.outputs)
    assert outputs.platform == "azure"
    assert outputs.cluster_name == "dev"
    nic_ips = {}
    for nic in built.of_type(NIC):
        vm = nic.name.removeprefix("dev-").removesuffix("-nic")
        nic_ips[vm] = nic  # address assigned by the (mock) provider, read back by the stack
    assert outputs.master.address.startswith("10.10.1.")
    assert outputs.api_endpoint == f"https://{outputs.master.address}:8443"
    gpu = [n for n in outputs.nodes if n.labels["pool"] == "gpu"]
    assert len(gpu) == 5
    assert all(n.gpu_count == 1 and n.gpu_model == "A100" and n.cpu == 24 for n in gpu)
    assert all(n.labels == {"pool": "gpu", "tier": "a100", "spot": "true"} for n in gpu)
    addresses = [n.address for n in outputs.nodes] + [outputs.master.address]
    assert len(set(addresses)) == len(addresses)
    assert set(nic_ips) == {n.name for n in outputs.nodes} | {"master"}


def test_rendered_inventory_passes_ansible_inventory_and_preflight(by_count, tmp_path):
    check_inventory(parse_stack_output(by_count[5].outputs), tmp_path)


@pytest.mark.parametrize(
    ("extra", "key"),
    [
        ({"allowedCidrs": ["10.0.0.1/8"]}, "pasture:allowedCidrs"),
        ({"sshPublicKey": ""}, "pasture:sshPublicKey"),
        ({"subnetCidr": "10.99.0.0/24"}, "pasture:subnetCidr"),
        ({"masterDiskGb": "tiny"}, "pasture:masterDiskGb"),
    ],
)
def test_bad_config_stops_the_program_naming_the_key(extra, key):
    with pytest.raises(ConfigError, match=key.replace("[", r"\[")):
        build_stack(azure_config(1, **extra))
