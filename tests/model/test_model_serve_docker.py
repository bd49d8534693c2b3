"""The operator's whole path for a signed model, in a real built image (feiteng, linux/amd64: llama.cpp's
server and a GGUF, the cheapest image that serves): `model pack` the project's tiny GGUF (made by
llama.cpp's own converter from tools/make_tiny_model.py's model), `model sign` (SM2 + cosign keys made
here), `bundle` the image and the model, `import` both into a second registry, then `docker run` the
image pulled from that registry with the model reference (oci://… in the second registry, and a mounted
directory with its signed record) and the public keys: it verifies and answers an OpenAI completion.

Then every refusal, each one `[xcforge] error:` line naming the file or key, exit 6, and the engine
never started (the launcher's `exec:` line never written): a flipped byte, a missing file, an extra
file, another key's signature, a model that does not fit the image, a chunk the registry lacks, a
registry that needs a login. `import` refuses a tampered bundle and one signed by another key, and
publishes nothing. Real registries (distribution 2.8, one with htpasswd), real keys, real openssl.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import openai
import pytest
import requests

from ocicore.registry import RegistryClient
from tests.builds.conftest import SITE
from tests.builds.conftest import cli as build_cli
from tests.model.model_helpers import KeyFiles, write_keys
from tests.registry_process import RegistryProcess, free_port

pytestmark = [pytest.mark.docker, pytest.mark.slow]
DOCKER = "/usr/bin/docker"
PLATFORM = "linux/amd64"
MAIN_REGISTRY = "127.0.0.1:5000"
GGUF = "tiny-q8_0.gguf"
LOGIN = {"operator": "s3cret-" + uuid.uuid4().hex[:8]}


def run_cli(*argv: str | Path) -> tuple[int, str, str]:
    """build.py as its own process (the operator's command line), output kept for the assertions."""
    done = build_cli(*map(str, argv), timeout=1800)
    return done.returncode, done.stdout, done.stderr


def ok(*argv: str | Path) -> str:
    code, out, err = run_cli(*argv)
    assert code == 0, err[-3000:]
    return out


def digest_line(out: str) -> str:
    return next(line.split()[1] for line in out.splitlines() if line.startswith("digest"))


def readable(folder: Path) -> Path:
    """The image runs as uid 2000: the mounted tree must be world-readable (pytest's tmp is 0700)."""
    folder.chmod(0o755)
    for path in folder.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return folder


@dataclass(frozen=True)
class Site:
    image: str  # the feiteng image as imported into the second registry, by digest
    model: str  # oci://INSIDE/…/tiny-gguf@sha256:… (imported)
    source_model: str  # the same artifact in the sender's registry, REF@DIGEST
    unpacked: Path  # `model unpack` of the imported artifact: the GGUF and .xcforge-model/
    safetensors: Path  # the tiny safetensors model, packed, signed and unpacked (the wrong format here)
    keys: KeyFiles
    other: KeyFiles
    pub: Path  # folder with sm2.pub and cosign.pub, mounted at /keys
    other_pub: Path  # the other key pair's public keys, mounted at /keys
    bundle: Path
    inside: RegistryProcess
    locked: RegistryProcess
    locked_model: str  # oci://LOCKED/…@sha256:… (pushed with the login)
    tmp: Path


def docker(*argv: str, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([DOCKER, *argv], capture_output=True, text=True, timeout=timeout, check=False)


def launcher(site: Site, *args: str, keys: Path | None = None, mounts: tuple[str, ...] = (),
             env: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """`docker run --rm` of the imported image in the foreground (host network: the registries listen
    on loopback), the given public keys at /keys."""
    flags = ["run", "--rm", "--platform", PLATFORM, "--network", "host", "-v", f"{keys or site.pub}:/keys:ro"]
    for mount in mounts:
        flags += ["-v", mount]
    for item in env:
        flags += ["-e", item]
    return docker(*flags, site.image, *args)


def refused(done: subprocess.CompletedProcess[str], *words: str) -> str:
    """Exit 6, one `[xcforge] error:` line holding every word, no traceback, and the engine never
    started: the launcher writes `exec: …` (or `run: …`) just before it hands over to llama-server."""
    errors = [line for line in done.stderr.splitlines() if line.startswith("[xcforge] error:")]
    assert done.returncode == 6, (done.returncode, done.stderr[-2000:])
    assert len(errors) == 1, done.stderr[-2000:]
    for word in words:
        assert word in errors[0], errors[0]
    assert "Traceback" not in done.stderr
    assert not any(line.startswith(("[xcforge] exec:", "[xcforge] run:")) for line in done.stderr.splitlines())
    assert "server is listening" not in done.stderr  # llama-server's own line once it serves
    return errors[0]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    from xcforge.config.matrix import load_matrix
    from xcforge.config.site import load_site
    from xcforge.paths import REPO_ROOT
    from xcforge.smoke import gguf
    from xcforge.smoke.checks import tiny_model

    tmp = tmp_path_factory.mktemp("serve-signed")
    prefix = f"{MAIN_REGISTRY}/xcforge-test-{uuid.uuid4().hex[:8]}"
    dist = tmp / "dist"
    build = build_cli("--target", "feiteng", "--platform", PLATFORM, "--site", str(SITE), "--registry", prefix,
                      "--push", "--dist", str(dist), timeout=3600)  # fmt: skip
    assert build.returncode == 0, build.stderr[-4000:]
    report = {r["target"]: r for r in json.loads((dist / "report.json").read_text())["results"]}["feiteng"]
    repository, reference = _repo_ref(report["refs"][0])
    image = f"{MAIN_REGISTRY}/{repository}@{RegistryClient(MAIN_REGISTRY).resolve(repository, reference)}"

    keys, other = write_keys(tmp / "keys"), write_keys(tmp / "other")
    pub, other_pub = tmp / "pub", tmp / "other-pub"
    for folder, pair in ((pub, keys), (other_pub, other)):
        folder.mkdir()
        shutil.copy(pair.sm2_pub, folder / "sm2.pub")
        shutil.copy(pair.cosign_pub, folder / "cosign.pub")
        readable(folder)
    sign = ["--sm2-key", keys.sm2_key, "--cosign-key", keys.cosign_key]
    trust = ["--sm2-key", keys.sm2_pub, "--cosign-key", keys.cosign_pub]

    matrix = load_matrix(REPO_ROOT / "matrix.yaml")
    with tiny_model(tmp / "tiny") as tiny:
        gguf_dir = gguf.tiny_gguf(matrix, matrix.targets["feiteng"], image, PLATFORM, tiny, tmp / "gguf",
                                  site=load_site(SITE))  # fmt: skip
    assert [p.name for p in gguf_dir.iterdir()] == [GGUF]

    pulled: list[str] = []
    with contextlib.ExitStack() as stack:
        source = stack.enter_context(RegistryProcess())
        inside = stack.enter_context(RegistryProcess())
        locked = stack.enter_context(RegistryProcess(htpasswd=LOGIN))
        repo = f"{source.address}/wt34-serve"
        # pack, push (unsigned), then sign the pushed digest: the steps an operator runs one by one.
        out = ok("model", "pack", gguf_dir, "--name", "tiny-gguf:1", "--dist", tmp / "pack", "--registry", repo,
                 "--push", "--no-audit")  # fmt: skip
        source_model = f"{repo}/tiny-gguf@{digest_line(out)}"
        ok("model", "sign", source_model, *sign, "--no-audit")
        ok("model", "verify", source_model, *trust, "--no-audit")
        # the wrong format for this image: the tiny safetensors model, signed the same way
        out = ok("model", "pack", tiny_dir := tmp / "tiny", "--name", "tiny-st:1", "--dist", tmp / "pack-st",
                 "--registry", repo, "--push", *sign, "--no-audit")  # fmt: skip
        safetensors_ref = f"{repo}/tiny-st@{digest_line(out)}"
        assert tiny_dir.is_dir()

        bundle = tmp / "site.tar"
        ok("bundle", image, "--model", source_model, "--model", safetensors_ref, "--out", bundle, *sign,
           "--report", tmp / "no-report", "--no-audit")  # fmt: skip
        ok("import", bundle, "--registry", inside.address, *trust, "--no-audit")
        inside_image = image.replace(MAIN_REGISTRY, inside.address, 1)
        inside_model = source_model.replace(source.address, inside.address, 1)
        identity = ["--allow-identity", source_model.split("@")[0]]
        ok("model", "verify", inside_model, *trust, *identity, "--no-audit")
        unpacked = tmp / "unpacked"
        ok("model", "unpack", inside_model, unpacked, *trust, *identity, "--no-audit")
        wrong = tmp / "unpacked-st"
        ok("model", "unpack", safetensors_ref.replace(source.address, inside.address, 1), wrong, *trust,
           "--allow-identity", safetensors_ref.split("@")[0], "--no-audit")  # fmt: skip

        # A site registry that needs a login: the model pushed there with the build side's credentials.
        import os

        user, password = next(iter(LOGIN.items()))
        saved = {k: os.environ.get(k) for k in ("XCFORGE_REGISTRY_USERNAME", "XCFORGE_REGISTRY_PASSWORD")}
        os.environ.update(XCFORGE_REGISTRY_USERNAME=user, XCFORGE_REGISTRY_PASSWORD=password)
        try:
            out = ok("model", "pack", gguf_dir, "--name", "tiny-gguf:1", "--dist", tmp / "pack-locked", "--registry",
                     f"{locked.address}/wt34-locked", "--push", *sign, "--no-audit")  # fmt: skip
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        locked_model = f"oci://{locked.address}/wt34-locked/tiny-gguf@{digest_line(out)}"

        pull = docker("pull", "--platform", PLATFORM, inside_image)
        assert pull.returncode == 0, pull.stderr
        pulled.append(inside_image)
        try:
            yield Site(
                image=inside_image,
                model="oci://" + inside_model,
                source_model=source_model,
                unpacked=readable(unpacked),
                safetensors=readable(wrong),
                keys=keys,
                other=other,
                pub=pub,
                other_pub=other_pub,
                bundle=bundle,
                inside=inside,
                locked=locked,
                locked_model=locked_model,
                tmp=tmp,
            )
        finally:
            for ref in [*pulled, image]:
                docker("rmi", "-f", ref)
            _delete_manifest(MAIN_REGISTRY, image)


def _repo_ref(ref: str) -> tuple[str, str]:
    path = ref.split("/", 1)[1]
    if "@" in path:
        return tuple(path.split("@", 1))  # type: ignore[return-value]
    repo, _, tag = path.rpartition(":")
    return repo, tag


def _delete_manifest(registry: str, ref: str) -> None:
    """What this module pushed to the shared registry goes again (distribution: delete by digest)."""
    repo, digest = ref.split("/", 1)[1].split("@", 1)
    with contextlib.suppress(requests.RequestException):
        requests.delete(f"http://{registry}/v2/{repo}/manifests/{digest}", timeout=30)


@contextlib.contextmanager
def served(site: Site, name: str, *args: str, mounts: tuple[str, ...] = ()) -> Iterator[tuple[int, str]]:
    port = free_port()
    container = f"xcforge-wt34-{name}-{uuid.uuid4().hex[:6]}"
    flags = ["run", "-d", "--name", container, "--platform", PLATFORM, "--network", "host",
             "-v", f"{site.pub}:/keys:ro", "--memory", "1g", "--cpus", "2"]  # fmt: skip
    for mount in mounts:
        flags += ["-v", mount]
    started = docker(*flags, site.image, *args, "--model-key", "/keys/sm2.pub", "--model-key", "/keys/cosign.pub",
                     "--served-model-name", "tiny", "--max-model-len", "512", "--port", str(port))  # fmt: skip
    assert started.returncode == 0, started.stderr
    try:
        yield port, container
    finally:
        docker("rm", "-f", container)


def _answers(site: Site, port: int, container: str) -> str:
    from xcforge.smoke.checks import ServedContainer, wait_healthy

    healthy, detail = wait_healthy(ServedContainer(container, port, "tiny"), timeout=300)
    logs = docker("logs", container).stderr
    assert healthy, detail + logs[-3000:]
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", timeout=120)
    done = client.completions.create(model="tiny", prompt="Hello", max_tokens=8, temperature=0)
    assert done.usage is not None and done.usage.completion_tokens > 0
    return docker("logs", container).stderr


def _verified_before_exec(logs: str, digest: str) -> None:
    lines = logs.splitlines()
    verified = [i for i, line in enumerate(lines) if line.startswith("[xcforge]") and "verified" in line
                and digest[7:19] in line]  # fmt: skip
    started = [i for i, line in enumerate(lines) if line.startswith(("[xcforge] exec:", "[xcforge] run:"))]
    assert verified and started and verified[0] < started[0], logs[-3000:]


# ------------------------------------------------------------------------------------------ served


def test_an_imported_model_by_reference_is_verified_then_served(site):
    digest = site.model.split("@")[1]
    with served(site, "oci", "--model", site.model) as (port, container):
        logs = _answers(site, port, container)
    assert f"fetch: GET http://{site.inside.address}/v2/" in logs
    _verified_before_exec(logs, digest)


def test_a_mounted_unpacked_model_with_its_record_is_verified_then_served(site):
    digest = (site.unpacked / ".xcforge-model" / "digest").read_text().strip()
    assert digest == site.model.split("@")[1]
    with served(site, "dir", "--model", "/models/tiny", mounts=(f"{site.unpacked}:/models/tiny:ro",)) as (
        port,
        container,
    ):
        logs = _answers(site, port, container)
    _verified_before_exec(logs, digest)


# ------------------------------------------------------------------------------------------ refused


@pytest.fixture()
def copy(site, tmp_path) -> Path:
    """A copy of the unpacked model (with its record) to spoil."""
    dest = tmp_path / "model"
    shutil.copytree(site.unpacked, dest)
    return dest


def _serve_dir(site: Site, model: Path, keys: Path | None = None) -> subprocess.CompletedProcess[str]:
    return launcher(site, "--model", "/models/tiny", "--model-key", "/keys/sm2.pub", "--model-key",
                    "/keys/cosign.pub", keys=keys, mounts=(f"{readable(model)}:/models/tiny:ro",))  # fmt: skip


def test_one_flipped_byte_in_the_weights_is_refused_naming_the_file(site, copy):
    data = bytearray((copy / GGUF).read_bytes())
    data[len(data) // 2] ^= 0x01
    (copy / GGUF).write_bytes(bytes(data))
    refused(_serve_dir(site, copy), f"file {GGUF} differs from the signed model")


def test_a_missing_file_is_refused_naming_it(site, copy):
    (copy / GGUF).unlink()
    refused(_serve_dir(site, copy), f"file {GGUF} is missing")


def test_an_extra_file_is_refused_naming_it(site, copy):
    (copy / "extra.bin").write_bytes(b"\0" * 16)
    refused(_serve_dir(site, copy), "extra file extra.bin")


def test_a_signature_by_another_key_is_refused_naming_the_key(site):
    done = _serve_dir(site, site.unpacked, keys=site.other_pub)
    line = refused(done, "no valid", "signed by another key")
    assert "/keys/cosign.pub" in line or "/keys/sm2.pub" in line, line
    # and by reference: fetched, then refused before anything starts
    by_ref = launcher(site, "--model", site.model, "--model-key", "/keys/sm2.pub", keys=site.other_pub)
    refused(by_ref, "no valid sm2 signature by key /keys/sm2.pub")


def test_a_model_the_image_cannot_serve_is_refused_by_the_launcher_and_by_deploy(site, copy):
    refused(_serve_dir(site, site.safetensors), "safetensors")
    # deploy: the GGUF artifact for a vLLM target, read from the registry's signed config
    code, out, err = run_cli("deploy", "--target", "cpu", "--image", site.image, "--model", "/models/m",
                             "--model-artifact", site.source_model, "--model-key",
                             site.keys.sm2_pub)  # fmt: skip
    assert code == 2 and out == "", err
    assert "GGUF" in err and "feiteng" in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_a_chunk_the_registry_lacks_is_refused_naming_the_file(site, tmp_path):
    with RegistryProcess() as lacking:
        repo = f"{lacking.address}/wt34-lacking"
        out = ok("model", "pack", site.unpacked / GGUF, "--name", "tiny-gguf:1", "--dist", tmp_path / "d",
                 "--registry", repo, "--push", "--sm2-key", site.keys.sm2_key, "--no-audit")  # fmt: skip
        digest = digest_line(out)
        client = RegistryClient(lacking.address)
        manifest = client.get_manifest("wt34-lacking/tiny-gguf", digest).json()
        chunk = manifest["layers"][0]["digest"]
        gone = requests.delete(f"http://{lacking.address}/v2/wt34-lacking/tiny-gguf/blobs/{chunk}", timeout=30)
        assert gone.status_code == 202, gone.text
        done = launcher(site, "--model", f"oci://{repo}/tiny-gguf@{digest}", "--model-key", "/keys/sm2.pub")
    refused(done, GGUF, "is not in the registry")


def test_a_registry_that_needs_a_login_gets_the_build_sides_credentials(site):
    user, password = next(iter(LOGIN.items()))
    fetch = ("fetch-model", site.locked_model, "/tmp/m", "--model-key", "/keys/sm2.pub", "--model-key",
             "/keys/cosign.pub")  # fmt: skip
    refused(launcher(site, *fetch), "asks for a login", "XCFORGE_REGISTRY_USERNAME")
    wrong = launcher(site, *fetch, env=(f"XCFORGE_REGISTRY_USERNAME={user}", "XCFORGE_REGISTRY_PASSWORD=nope"))
    refused(wrong, "refused the login")
    done = launcher(site, *fetch, env=(f"XCFORGE_REGISTRY_USERNAME={user}", f"XCFORGE_REGISTRY_PASSWORD={password}"))
    assert done.returncode == 0, done.stderr[-2000:]
    assert "verified" in done.stderr and "Traceback" not in done.stderr
    # serve by reference with the login: fetched, verified, and only then started (--dry-run stops there)
    login = (f"XCFORGE_REGISTRY_USERNAME={user}", f"XCFORGE_REGISTRY_PASSWORD={password}")
    served_plan = launcher(site, "--dry-run", "--model", site.locked_model, "--model-key", "/keys/sm2.pub", env=login)
    assert served_plan.returncode == 0, served_plan.stderr[-2000:]


# ------------------------------------------------------------------------------------------ import


def _flip_in_bundle(bundle: Path, needle: bytes, into: Path) -> Path:
    data = bytearray(bundle.read_bytes())
    at = data.find(needle)
    assert at > 0
    data[at] ^= 0x01
    into.write_bytes(bytes(data))
    return into


def test_import_publishes_nothing_from_a_tampered_bundle_or_one_signed_by_another_key(site, tmp_path):
    weights = (site.unpacked / GGUF).read_bytes()
    tampered = _flip_in_bundle(site.bundle, weights[len(weights) // 2 : len(weights) // 2 + 64], tmp_path / "t.tar")
    with RegistryProcess() as fresh:
        code, _, err = run_cli("import", tampered, "--registry", fresh.address, "--sm2-key", site.keys.sm2_pub,
                               "--no-audit")  # fmt: skip
        errors = [line for line in err.splitlines() if line.startswith("error:")]
        assert code == 11 and len(errors) == 1, err[-2000:]
        assert "does not match its digest in the signed manifest" in errors[0]
        code, _, err = run_cli("import", site.bundle, "--registry", fresh.address, "--sm2-key", site.other.sm2_pub,
                               "--no-audit")  # fmt: skip
        errors = [line for line in err.splitlines() if line.startswith("error:")]
        assert code == 8 and len(errors) == 1, err[-2000:]
        catalog = requests.get(f"http://{fresh.address}/v2/_catalog", timeout=30).json()
        assert catalog.get("repositories") in (None, []), catalog
