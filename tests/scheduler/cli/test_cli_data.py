"""`pasture data push|pull` and `pasture image push` over a real sshd (paramiko SFTP)."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid

import pytest
import yaml

from tests.sshd import keygen, running_sshd

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def sshd(tmp_path_factory):
    """A real sshd with SFTP on 127.0.0.1:<free port>; yields (port, dir with key ``user``)."""
    d = tmp_path_factory.mktemp("sshd")
    keygen(d / "user")
    with running_sshd(d, (d / "user.pub").read_text(), "Subsystem sftp internal-sftp\n") as port:
        yield port, d


def _ssh_args(sshd, tmp_path) -> list[str]:
    port, d = sshd
    return [
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--user",
        "root",
        "--key",
        str(d / "user"),
        "--known-hosts",
        str(tmp_path / "known_hosts"),
    ]


def test_push_and_pull_a_directory_and_a_file(sshd, cli, tmp_path):
    share = tmp_path / "share"
    share.mkdir()
    src = tmp_path / "dataset"
    (src / "train").mkdir(parents=True)
    (src / "train" / "a.bin").write_bytes(os.urandom(300_000))
    (src / "labels.csv").write_text("x,y\n1,2\n")
    args = _ssh_args(sshd, tmp_path) + ["--share-dir", str(share)]

    r = cli("data", "push", str(src), "datasets/mnist", *args)
    assert r.exit_code == 0, r.output
    assert "pushed 2 file(s)" in r.output
    assert (share / "datasets/mnist/train/a.bin").read_bytes() == (src / "train/a.bin").read_bytes()
    assert (share / "datasets/mnist/labels.csv").read_text() == "x,y\n1,2\n"
    # the host key was accepted on first use and remembered (accept-new)
    assert "127.0.0.1" in (tmp_path / "known_hosts").read_text()

    back = tmp_path / "back"
    r = cli("data", "pull", str(back), "datasets/mnist", *args)
    assert r.exit_code == 0, r.output
    assert (back / "train/a.bin").read_bytes() == (src / "train/a.bin").read_bytes()

    one = tmp_path / "one.csv"
    r = cli("data", "pull", str(one), "datasets/mnist/labels.csv", *args)
    assert r.exit_code == 0, r.output
    assert one.read_text() == "x,y\n1,2\n"

    r = cli("data", "pull", str(tmp_path / "x"), "datasets/none", *args)
    assert r.exit_code == 5
    r = cli("data", "push", str(one), "../../etc", *args)
    assert r.exit_code == 2
    assert "inside the share" in r.output
    assert not (tmp_path / "etc").exists()


def test_changed_host_key_is_refused(sshd, cli, tmp_path):
    port, d = sshd
    keygen(tmp_path / "other")
    other = (tmp_path / "other.pub").read_text().split()
    (tmp_path / "known_hosts").write_text(f"[127.0.0.1]:{port} {other[0]} {other[1]}\n")
    share = tmp_path / "share"
    share.mkdir()
    (tmp_path / "f").write_text("x")
    r = cli(
        "data",
        "push",
        str(tmp_path / "f"),
        "f",
        *_ssh_args(sshd, tmp_path),
        "--share-dir",
        str(share),
    )
    assert r.exit_code == 7
    assert "BadHostKeyException" in r.output
    assert not (share / "f").exists()


@pytest.fixture()
def tiny_image(tmp_path):
    if shutil.which("podman") is None:
        pytest.skip("podman not installed (make deps installs it)")
    rootfs = tmp_path / "rootfs"
    rootfs.mkdir()
    (rootfs / "hello.txt").write_text("hello\n")
    name = f"localhost/pasture-push-test-{uuid.uuid4().hex[:8]}:1"
    tar = subprocess.Popen(["tar", "-C", str(rootfs), "-cf", "-", "."], stdout=subprocess.PIPE)
    subprocess.run(
        ["podman", "import", "-", name],
        stdin=tar.stdout,
        check=True,
        capture_output=True,
        timeout=120,
    )
    tar.wait()
    yield name
    subprocess.run(["podman", "rmi", "-f", name], capture_output=True, timeout=120)


def test_image_push_loads_on_every_inventory_node(sshd, cli, tmp_path, tiny_image):
    port, d = sshd
    inventory = {
        "all": {
            "children": {
                "nodes": {
                    "hosts": {
                        "node-1": {"ansible_host": "127.0.0.1", "ansible_user": "root"},
                        "node-2": {"ansible_host": "127.0.0.1"},
                    }
                }
            }
        }
    }
    inv = tmp_path / "inventory.yml"
    inv.write_text(yaml.safe_dump(inventory))
    r = cli(
        "image",
        "push",
        tiny_image,
        "--inventory",
        str(inv),
        "--cli",
        "podman",
        "--port",
        str(port),
        "--key",
        str(d / "user"),
        "--known-hosts",
        str(tmp_path / "known_hosts"),
    )
    assert r.exit_code == 0, r.output
    assert r.output.count("Loaded image") == 2


def test_image_push_of_a_missing_image_fails(cli, tmp_path):
    if shutil.which("podman") is None:
        pytest.skip("podman not installed")
    inv = tmp_path / "inventory.yml"
    inv.write_text(yaml.safe_dump({"all": {"children": {"nodes": {"hosts": {"n": {}}}}}}))
    r = cli("image", "push", "localhost/does-not-exist:0", "--inventory", str(inv))
    assert r.exit_code == 1
    assert "podman save" in r.output


def test_image_push_to_the_nodes_the_api_lists(sshd, cli, tmp_path, tiny_image, logged_in):
    from scheduler.store import NodeRecord

    port, d = sshd
    _, env = logged_in
    # both nodes at 127.0.0.1, where the test's sshd listens
    for name in ("node-1", "node-2"):
        env.store.register_node(
            NodeRecord(name=name, address="127.0.0.1", cpu_m=8000, memory=16 << 30)
        )
    r = cli(
        "image",
        "push",
        tiny_image,
        "--cli",
        "podman",
        "--port",
        str(port),
        "--key",
        str(d / "user"),
        "--known-hosts",
        str(tmp_path / "known_hosts"),
    )
    assert r.exit_code == 0, r.output
    assert "node-1" in r.output and "node-2" in r.output
    assert r.output.count("Loaded image") == 2
