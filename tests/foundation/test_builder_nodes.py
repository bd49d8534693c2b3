"""Reading `docker buildx inspect`: which node buildx sends a platform to, and whether that node
builds it natively. The texts are what buildx 0.13 printed for the three kinds of builder here."""

from __future__ import annotations

from xcforge.bake.runner import node_for, parse_nodes

DOCKER_DRIVER = """Name:          default
Driver:        docker
Last Activity: 2026-12-01 22:15:52 +0000 UTC

Nodes:
Name:             default
Endpoint:         default
Status:           running
BuildKit version: v0.13.2
Platforms:        linux/amd64, linux/amd64/v2, linux/amd64/v3, linux/arm64, linux/386
"""

FARM = """Name:          xcforge-farm
Driver:        remote
Last Activity: 2026-12-01 22:15:52 +0000 UTC

Nodes:
Name:             amd64
Endpoint:         tcp://127.0.0.1:12340
Status:           running
BuildKit version: v0.13.2
Platforms:        linux/amd64*, linux/amd64/v2, linux/amd64/v3, linux/amd64/v4, linux/arm64
Labels:
 org.mobyproject.buildkit.worker.executor:         oci

Name:             arm64
Endpoint:         tcp://10.231.0.2:12340
Status:           running
BuildKit version: v0.13.2
Platforms:        linux/arm64*, linux/amd64, linux/amd64/v2, linux/amd64/v3, linux/amd64/v4
"""

KUNPENG = FARM.replace(
    "linux/arm64*, linux/amd64, linux/amd64/v2, linux/amd64/v3, linux/amd64/v4",
    "linux/arm64*, linux/arm64/v8, linux/arm/v7",
)


def test_a_single_node_builds_its_own_platform_natively_and_the_rest_under_qemu():
    [node] = parse_nodes(DOCKER_DRIVER)
    assert (node.name, node.declared, node.native) == ("default", (), "linux/amd64")
    assert node_for((node,), "linux/arm64") is node  # the one node, emulating


def test_a_farm_sends_each_platform_to_its_declared_node_and_knows_that_node_emulates():
    amd64, arm64 = nodes = parse_nodes(FARM)
    assert (amd64.name, amd64.declared, amd64.native) == ("amd64", ("linux/amd64",), "linux/amd64")
    assert (arm64.name, arm64.declared, arm64.native) == ("arm64", ("linux/arm64",), "linux/amd64")
    assert node_for(nodes, "linux/amd64") is amd64 and node_for(nodes, "linux/arm64") is arm64
    assert node_for(nodes, "linux/riscv64") is None  # nobody declared, nobody's own: buildx decides


def test_a_real_arm64_node_is_native_for_arm64():
    _, arm64 = parse_nodes(KUNPENG)
    assert arm64.native == "linux/arm64"


def test_an_unreadable_answer_is_no_nodes():
    assert parse_nodes("") == () and parse_nodes("ERROR: no builder found") == ()
