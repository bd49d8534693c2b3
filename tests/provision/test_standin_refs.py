"""Stand-in naming and registry checks that need no docker: pure functions, the CLI, a fake registry."""

from __future__ import annotations

import hashlib
import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from ocicore.errors import InvalidReference
from xcforge.errors import ConfigError
from xcforge.provision import standin
from xcforge.provision.standin import build_context_arg, normalize_ref, standin_ref


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        ("ubuntu", "docker.io/library/ubuntu:latest"),
        ("ubuntu:22.04", "docker.io/library/ubuntu:22.04"),
        ("docker.io/ubuntu:22.04", "docker.io/library/ubuntu:22.04"),
        ("index.docker.io/library/ubuntu:22.04", "docker.io/library/ubuntu:22.04"),
        ("nvidia/cuda:12.9.1-base-ubuntu22.04", "docker.io/nvidia/cuda:12.9.1-base-ubuntu22.04"),
        ("docker.io/nvidia/cuda:12.9.1-base-ubuntu22.04", "docker.io/nvidia/cuda:12.9.1-base-ubuntu22.04"),
        (
            "quay.io/ascend/cann:8.3.rc1-910b-ubuntu22.04-py3.11",
            "quay.io/ascend/cann:8.3.rc1-910b-ubuntu22.04-py3.11",
        ),
        ("nvcr.io/nvidia/pytorch:25.01-py3", "nvcr.io/nvidia/pytorch:25.01-py3"),
        ("localhost/team/img:1", "localhost/team/img:1"),
        ("localhost:5000/img", "localhost:5000/img:latest"),
        ("  registry.example.com:8443/a/b/c:v1  ", "registry.example.com:8443/a/b/c:v1"),
        ("ubuntu@sha256:" + "a" * 64, "docker.io/library/ubuntu@sha256:" + "a" * 64),
        ("ubuntu:22.04@sha256:" + "b" * 64, "docker.io/library/ubuntu:22.04@sha256:" + "b" * 64),
    ],
)
def test_normalize_ref(ref: str, expected: str) -> None:
    assert normalize_ref(ref) == expected


@pytest.mark.parametrize(
    "ref",
    ["", "   ", "Ubuntu:22.04", "docker.io/Nvidia/cuda:12", "ubuntu:bad tag", "ubuntu@sha256:xyz", "a//b:1", "ubuntu:"],
)
def test_normalize_ref_rejects_invalid(ref: str) -> None:
    with pytest.raises(InvalidReference):
        normalize_ref(ref)


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        (
            "docker.io/nvidia/cuda:12.9.1-base-ubuntu22.04",
            "127.0.0.1:5000/standin/docker.io/nvidia/cuda:12.9.1-base-ubuntu22.04",
        ),
        ("nvidia/cuda:12.9.1-base-ubuntu22.04", "127.0.0.1:5000/standin/docker.io/nvidia/cuda:12.9.1-base-ubuntu22.04"),
        ("ubuntu", "127.0.0.1:5000/standin/docker.io/library/ubuntu:latest"),
        (
            "quay.io/ascend/cann:8.3.rc1-910b-ubuntu22.04-py3.11",
            "127.0.0.1:5000/standin/quay.io/ascend/cann:8.3.rc1-910b-ubuntu22.04-py3.11",
        ),
        # ':' cannot appear in a repository path, so a registry port becomes '_<port>'.
        ("registry.example.com:8443/a/b:v1", "127.0.0.1:5000/standin/registry.example.com_8443/a/b:v1"),
        # A stand-in cannot carry the vendor digest: the tag stays, the digest goes.
        ("ubuntu:22.04@sha256:" + "c" * 64, "127.0.0.1:5000/standin/docker.io/library/ubuntu:22.04"),
        ("ubuntu@sha256:" + "d" * 64, "127.0.0.1:5000/standin/docker.io/library/ubuntu:sha256-" + "d" * 64),
    ],
)
def test_standin_ref(ref: str, expected: str) -> None:
    assert standin_ref(ref) == expected
    # The mirrored name is itself a valid, already normalised reference.
    assert normalize_ref(expected) == expected


def test_standin_ref_other_registry() -> None:
    assert standin_ref("ubuntu:22.04", "localhost:5055/") == "localhost:5055/standin/docker.io/library/ubuntu:22.04"


@pytest.mark.parametrize("registry", ["", "http://127.0.0.1:5000"])
def test_standin_ref_rejects_bad_registry(registry: str) -> None:
    with pytest.raises(ConfigError):
        standin_ref("ubuntu", registry)


def test_build_context_arg_keeps_digest() -> None:
    digest = "sha256:" + "e" * 64
    assert build_context_arg(f"nvidia/cuda:12.9.1@{digest}") == (
        f"docker.io/nvidia/cuda:12.9.1@{digest}=docker-image://127.0.0.1:5000/standin/docker.io/nvidia/cuda:12.9.1"
    )


def test_recipe_key_follows_apt_sources(tmp_path: Path) -> None:
    sources = tmp_path / "debian.sources"
    sources.write_text("Types: deb\nURIs: http://mirror.one/debian\nSuites: bookworm\nComponents: main\n")
    first = standin.recipe_key(["amd64", "arm64"], sources)
    assert standin.recipe_key(["arm64", "amd64"], sources) == first
    sources.write_text("Types: deb\nURIs: http://mirror.two/debian\nSuites: bookworm\nComponents: main\n")
    assert standin.recipe_key(["amd64", "arm64"], sources) != first


# ------------------------------------------------------------------------------------------------ CLI


def test_cli_list(capsys: pytest.CaptureFixture[str]) -> None:
    code = standin.main(
        ["--list", "--registry", "127.0.0.1:5000", "--image", "ubuntu:22.04", "--image", "ubuntu:22.04"]
    )
    assert code == 0
    assert capsys.readouterr().out == (
        "docker.io/library/ubuntu:22.04 -> 127.0.0.1:5000/standin/docker.io/library/ubuntu:22.04\n"
    )


def test_cli_error_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code = standin.main(["--list", "--image", "Not A Ref"])
    assert code == ConfigError.exit_code
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err


def test_cli_lists_matrix_bases(repo_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("xcforge.config.matrix")
    matrix = pytest.importorskip("xcforge.config.matrix").load_matrix(repo_root / "matrix.yaml")
    code = standin.main(["--list", "--registry", "127.0.0.1:5000", "--matrix", str(repo_root / "matrix.yaml")])
    assert code == 0
    lines = capsys.readouterr().out.splitlines()
    bases = {normalize_ref(t.base.image) for t in matrix.targets.values()}
    assert {line.split(" -> ")[0] for line in lines} == bases
    assert all(" -> 127.0.0.1:5000/standin/" in line for line in lines)


# ------------------------------------------------------------------------------ skip logic, fake registry


class _FakeRegistry(http.server.BaseHTTPRequestHandler):
    documents: dict[str, tuple[str, bytes]] = {}  # noqa: RUF012  # filled per test

    def do_GET(self) -> None:
        found = self.documents.get(self.path)
        if found is None:
            self.send_error(404)
            return
        content_type, body = found
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def fake_registry() -> Iterator[tuple[str, dict[str, tuple[str, bytes]]]]:
    documents: dict[str, tuple[str, bytes]] = {}
    handler = type("Handler", (_FakeRegistry,), {"documents": documents})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}", documents
    finally:
        server.shutdown()


def _publish(documents: dict, repo: str, tag: str, labels: dict[str, str], arches: list[str]) -> None:
    config = json.dumps({"os": "linux", "architecture": arches[0], "config": {"Labels": labels}}).encode()
    config_digest = "sha256:" + hashlib.sha256(config).hexdigest()
    documents[f"/v2/{repo}/blobs/{config_digest}"] = ("application/octet-stream", config)
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"digest": config_digest},
        }
    ).encode()
    manifest_digest = "sha256:" + hashlib.sha256(manifest).hexdigest()
    documents[f"/v2/{repo}/manifests/{manifest_digest}"] = ("application/vnd.oci.image.manifest.v1+json", manifest)
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{"digest": manifest_digest, "platform": {"os": "linux", "architecture": a}} for a in arches],
    }
    documents[f"/v2/{repo}/manifests/{tag}"] = ("application/vnd.oci.image.index.v1+json", json.dumps(index).encode())


def test_image_status(fake_registry: tuple[str, dict]) -> None:
    registry, documents = fake_registry
    original = "docker.io/nvidia/cuda:12.9.1-base-ubuntu22.04"
    repo = "standin/docker.io/nvidia/cuda"
    tag = "12.9.1-base-ubuntu22.04"
    labels = {
        standin.LABEL_OF: original,
        standin.LABEL_ROOTFS: "f" * 64,
        standin.LABEL_RECIPE: "r1",
    }

    assert standin.image_status(original, registry, "r1", "f" * 64).state == "missing"

    _publish(documents, repo, tag, labels, ["amd64"])
    assert standin.image_status(original, registry, "r1", "f" * 64).state == "stale (no linux/arm64)"

    _publish(documents, repo, tag, labels, ["amd64", "arm64"])
    assert standin.image_status(original, registry, "r1", "f" * 64).current
    # No cached rootfs to compare with: the recipe decides.
    assert standin.image_status(original, registry, "r1", None).current
    assert standin.image_status(original, registry, "r1", "0" * 64).state == "stale (other rootfs)"
    assert standin.image_status(original, registry, "r2", None).state == "stale (other rootfs recipe)"
