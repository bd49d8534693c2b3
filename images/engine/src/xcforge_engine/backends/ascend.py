"""Kunpeng aarch64 + Huawei Ascend NPU: devices and the host driver are passed in by hand.

Without Ascend Docker Runtime, `docker run` must name each device node and bind-mount the driver's
libraries and version file; a missing driver mount shows up in vLLM only as
`libascend_hal.so: cannot open shared object file`, and a CANN newer than the driver fails late.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from xcforge_engine.backends.base import (
    ERROR,
    OK,
    WARNING,
    DeriveInput,
    Finding,
    Setting,
    compat_findings,
    device_finding,
    file_finding,
    image_part_finding,
    numbered_finding,
    visible_settings,
)
from xcforge_engine.compat import judge_cann
from xcforge_engine.host import Host
from xcforge_engine.image import ImageFacts
from xcforge_engine.software import Software

DRIVER = "/usr/local/Ascend/driver"
DRIVER_LIB = f"{DRIVER}/lib64"
VERSION_INFO = f"{DRIVER}/version.info"
TOOLKIT = "/usr/local/Ascend/ascend-toolkit/latest"
_LIB_MOUNT = f"-v {DRIVER_LIB}/:{DRIVER_LIB}/"


def _key_value(text: str, *keys: str) -> str | None:
    for key in keys:
        match = re.search(rf"^\s*{re.escape(key)}\s*=\s*(\S+)", text, re.M | re.I)
        if match:
            return match.group(1)
    return None


def driver_version(host: Host) -> str | None:
    return _key_value(host.read_text(VERSION_INFO) or "", "Version", "package_version")


def toolkit_home(env: Mapping[str, str]) -> str:
    return env.get("ASCEND_TOOLKIT_HOME") or TOOLKIT


def cann_version(host: Host, env: Mapping[str, str]) -> str | None:
    home = toolkit_home(env)
    for info in host.glob(f"{home}/*/ascend_toolkit_install.info"):
        version = _key_value(host.read_text(info) or "", "version")
        if version:
            return version
    cfg = host.read_text(f"{home}/version.cfg") or ""
    match = re.search(r"\[[\d.]+:([\w.]+)\]", cfg)
    return match.group(1) if match else None


def _hal_library(host: Host) -> str | None:
    for sub in ("", "/driver", "/common"):
        candidate = f"{DRIVER_LIB}{sub}/libascend_hal.so"
        if host.is_file(candidate):
            return candidate
    return None


class AscendBackend:
    name = "ascend"
    rank = 20
    probe = "/dev/davinci_manager"
    distributions: tuple[str, ...] = ("vllm-ascend", "torch-npu")
    title = "Huawei Ascend NPU"
    device_word = "NPU"
    hint = (
        "one --device /dev/davinciN per NPU to use; with Ascend Docker Runtime, "
        "-e ASCEND_VISIBLE_DEVICES=<ids> provides the devices and driver mounts instead"
    )
    visible_env = ("ASCEND_RT_VISIBLE_DEVICES",)

    def device_nodes(self, host: Host) -> list[str]:
        return host.numbered("/dev/davinci")

    def checks(self, host: Host, env: Mapping[str, str], image: ImageFacts) -> list[Finding]:
        findings = [
            device_finding(host, f"ascend.device.{name}", f"/dev/{name}", (f"--device /dev/{name}",))
            for name in ("davinci_manager", "devmm_svm", "hisi_hdc")
        ]
        findings.append(numbered_finding(host, "ascend.device.davinci", "/dev/davinci", ("--device /dev/davinci0",)))
        hal = _hal_library(host)
        if hal:
            findings.append(Finding("ascend.driver.lib64", OK, f"driver library {hal}"))
        else:
            findings.append(
                Finding(
                    "ascend.driver.lib64",
                    ERROR,
                    f"driver mount {DRIVER_LIB} (libascend_hal.so) is missing",
                    "",
                    (_LIB_MOUNT,),
                    subject=f"driver mount {DRIVER_LIB} (libascend_hal.so)",
                )
            )
        findings.append(
            file_finding(host, "ascend.driver.version", VERSION_INFO, (f"-v {VERSION_INFO}:{VERSION_INFO}",))
        )
        for check_id, path in (
            ("ascend.tool.npu-smi", "/usr/local/bin/npu-smi"),
            ("ascend.tool.dcmi", "/usr/local/dcmi"),
            ("ascend.install-info", "/etc/ascend_install.info"),
        ):
            findings.append(
                file_finding(
                    host,
                    check_id,
                    path,
                    (f"-v {path}:{path}",),
                    WARNING,
                    "vendor tools and some CANN components read it; serving usually works without",
                )
            )
        home = toolkit_home(env)
        findings.append(image_part_finding(image, "ascend.toolkit", host.is_dir(home), "CANN toolkit", home))
        return findings

    def versions(self, host: Host, env: Mapping[str, str], software: Software) -> dict[str, str | None]:
        return {"driver": driver_version(host), "cann": cann_version(host, env)}

    def compat(self, versions: Mapping[str, str | None]) -> list[Finding]:
        return compat_findings("ascend.compat.driver", judge_cann, versions.get("cann"), versions.get("driver"))

    def derive(self, given: DeriveInput) -> list[Setting]:
        return visible_settings(self, given)


ASCEND = AscendBackend()
BACKEND = ASCEND
