"""The pasture image (API, loop, agent) of the in-cluster scheduler: built from the
repository's ``Containerfile`` and pushed to the stack's registry in the same
``pulumi up``, or taken as given by reference (config ``pastureImage``).

    pastureImage == ""  -> docker-build Image (context: repository root, build arg
                           BASE_IMAGE = pastureImageBase, linux/amd64, push to the ACR
                           with its admin credentials)
                        -> "<login server>/pasture@sha256:<digest>"
    pastureImage != ""  -> that reference, unchanged (no build, registry admin stays off)

The workloads take the returned output as their image: they depend on the push and pull
exactly the bytes that were pushed (a digest, not a tag that a later push could move).
Building needs Docker with BuildKit (``docker buildx``) where ``pulumi up`` runs.
"""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

import pulumi
import pulumi_docker_build as docker_build
from pulumi_azure_native import containerregistry

from stacks.config import StackConfig

REPO_ROOT = Path(__file__).resolve().parents[2]
CONTAINERFILE = REPO_ROOT / "Containerfile"
REPOSITORY = "pasture"


def builds_image(cfg: StackConfig) -> bool:
    """Whether the stack builds the image (no ``pastureImage`` reference given)."""
    return not cfg.pasture_image


def _version() -> str:
    try:
        return metadata.version("pasture")
    except metadata.PackageNotFoundError:  # the program run from a checkout, not installed
        return "dev"


def pasture_image(
    name: str,
    cfg: StackConfig,
    resource_group_name: pulumi.Input[str],
    registry: containerregistry.Registry,
    opts: pulumi.ResourceOptions,
) -> pulumi.Output[str]:
    """The image reference the workloads run (see the module docstring).

    Args:
        name: resource-name prefix (the cluster name).
        cfg: stack config (``pastureImage``, ``pastureImageBase``).
        resource_group_name: the registry's resource group.
        registry: the stack's container registry (admin user enabled when building).
        opts: options of the image resource (parent).
    """
    if not builds_image(cfg):
        return pulumi.Output.from_input(cfg.pasture_image)
    creds = containerregistry.list_registry_credentials_output(
        resource_group_name=resource_group_name,
        registry_name=registry.name,
        opts=pulumi.InvokeOutputOptions(parent=opts.parent),
    )
    repository = registry.login_server.apply(lambda server: f"{server}/{REPOSITORY}")
    image = docker_build.Image(
        f"{name}-image",
        context={"location": str(REPO_ROOT)},
        dockerfile={"location": str(CONTAINERFILE)},
        build_args={"BASE_IMAGE": cfg.pasture_image_base},
        platforms=[docker_build.Platform.LINUX_AMD64],
        tags=[repository.apply(lambda repo: f"{repo}:{_version()}")],
        push=True,
        registries=[
            {
                "address": registry.login_server,
                "username": creds.username,
                "password": pulumi.Output.secret(creds.passwords[0].value),
            }
        ],
        opts=opts,
    )
    return pulumi.Output.concat(repository, "@", image.digest)
