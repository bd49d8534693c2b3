"""`xcforge-engine check-install`: prove at build time that the image's engine is what it claims.

Run as the last build step (and again by the smoke test): vLLM imports under the image's own
environment, its version is the matrix's, the plugin's entry point is registered where the plugin
was installed, and `pip check` is clean except for the exceptions the matrix accepts (each with
its reason). The result goes to /etc/xcforge/verification.json with the verification level this
build reached; a failed check fails the build. Steps skipped on a stand-in are recorded with their
reason, never reported as passed.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

from xcforge_engine import log, vendor_stack
from xcforge_engine.errors import InstallCheckFailed

VERIFICATION_JSON = "/etc/xcforge/verification.json"
IMAGE_JSON = "/etc/xcforge/image.json"
INSTALL_JSON = "/etc/xcforge/install.json"
INSTALL_SPEC_JSON = "/etc/xcforge/install-spec.json"
# Build-time levels in order; smoke adds served-cpu and device-tested (xcforge/plan/verification.py).
LEVELS = ("rendered", "deps-resolved", "engine-installed", "plugin-installed")


@dataclass
class Check:
    name: str
    status: str  # ok | failed | skipped
    detail: str

    def as_dict(self) -> dict[str, str]:
        return {"name": self.name, "status": self.status, "detail": self.detail}


@dataclass
class InstallReport:
    checks: list[Check] = field(default_factory=list)
    level: str = "rendered"

    def add(self, name: str, status: str, detail: str) -> None:
        self.checks.append(Check(name, status, detail))
        (log.info if status != "failed" else log.error)(f"check-install: {name}: {status}: {detail}")

    @property
    def failed(self) -> list[Check]:
        return [c for c in self.checks if c.status == "failed"]


def _read_json(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as fh:
            loaded = json.load(fh)
    except (OSError, ValueError):
        return {}
    return loaded if isinstance(loaded, dict) else {}


def _public(version: str) -> str:
    return version.split("+", 1)[0]


STANDIN_FILE = "/etc/xcforge-stand-in"


# `import vllm` alone is lazy; the engine arguments pull in torch, transformers and vLLM's config,
# which is where a wrong pin (transformers too new for the release) shows.
# vLLM logs to stdout on import: the version comes on a line of its own, after a marker.
_MARK = "xcforge-engine-version="
_DEEP = f"import vllm; from vllm.engine.arg_utils import EngineArgs; print('\\n{_MARK}' + vllm.__version__)"
_SHALLOW = f"import vllm; print('\\n{_MARK}' + vllm.__version__)"
# A device library of the vendor's that a stand-in base cannot have (torch_npu needs CANN's).
_VENDOR_LIBRARY = re.compile(r"(lib[\w.+-]+\.so[\w.]*): cannot open shared object file")


def _python(code: str, timeout: float, env: Mapping[str, str]) -> tuple[int | None, str, str]:
    try:
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return None, "", f"did not finish in {timeout:.0f} s"
    marked = [line.removeprefix(_MARK) for line in proc.stdout.splitlines() if line.startswith(_MARK)]
    return proc.returncode, (marked[-1] if marked else proc.stdout.strip()), proc.stderr


def _import_engine(timeout: float) -> tuple[bool, str, str]:
    """Import vLLM in a child (it takes tens of seconds and may crash): (ok, version or reason, note).

    On a vendor base the deep import must work. On a stand-in base (no vendor libraries) a device
    torch that loads them on import (torch_npu: torch auto-loads it, transformers imports it) cannot;
    there the check falls back to `import vllm` with torch's device-backend autoload off, and says
    so rather than passing silently."""
    code, out, err = _python(_DEEP, timeout, os.environ)
    if code == 0:
        return True, out, ""
    missing = _VENDOR_LIBRARY.search(err)
    if code is not None and missing and os.path.exists(STANDIN_FILE):
        env = {**os.environ, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}
        code, out, err = _python(_SHALLOW, timeout, env)
        note = (
            f" (stand-in base without the vendor's {missing.group(1)}: only `import vllm` with torch's "
            "device-backend autoload off was checked)"
        )
        if code == 0:
            return True, out, note
    lines = [line for line in err.strip().splitlines() if line.strip()]
    tail = lines[-1] if lines else f"exit {code}"
    return False, f"`import vllm` failed: {tail[:300]}", ""


def _run_binaries(binaries: list[str] | None, timeout: float) -> tuple[bool, str, str]:
    """A compiled server (llama.cpp) runs on this CPU: the server prints its version, every other
    binary the build installed starts (its usage text; a signal such as SIGILL fails the check)."""
    server, *tools = binaries or ["llama-server"]
    found = []
    for name, args in ((server, ["--version"]), *((tool, ["--help"]) for tool in tools)):
        try:
            proc = subprocess.run([name, *args], capture_output=True, text=True, timeout=timeout)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return False, f"{name} {args[0]}: {exc}", ""
        text = (proc.stdout + proc.stderr).strip()
        if proc.returncode < 0 or (name == server and proc.returncode != 0) or not text:
            return False, f"{name} {args[0]} exited {proc.returncode}: {text[-200:]}", ""
        match = re.search(r"version: (\S+(?: \([0-9a-f]+\))?)", text)
        found.append(f"{name} {match.group(1)}" if match else f"{name} runs")
    return True, ", ".join(found), ""


def pip_check_problems(allowed: list[str], omitted: list[str]) -> tuple[list[str], list[str]]:
    """(unexpected lines, accepted lines) of `pip check`."""
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "check"], capture_output=True, text=True, env={**os.environ, "PIP_NO_INPUT": "1"}
    )
    lines = [line.strip() for line in proc.stdout.splitlines() if line.strip() and "No broken requirements" not in line]
    omitted_re = [re.compile(rf"requires {re.escape(name)}\b", re.I) for name in omitted]
    allowed_re = [re.compile(pattern) for pattern in allowed]
    unexpected, accepted = [], []
    for line in lines:
        if any(r.search(line) for r in allowed_re + omitted_re):
            accepted.append(line)
        else:
            unexpected.append(line)
    return unexpected, accepted


LOCK_TXT = "/etc/xcforge/lock.txt"
PLACEHOLDER_MARKER = vendor_stack.PLACEHOLDER_MARKER
_canonical = vendor_stack.canonical


def lock_pins(text: str) -> dict[str, str]:
    """name → version of every `name==version` requirement line of a lock."""
    found = {}
    for line in text.splitlines():
        m = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)", line)
        if m:
            found[_canonical(m.group(1))] = m.group(2)
    return found


# name → (version, is an xcforge placeholder) of every distribution this Python sees (the first wins).
installed_distributions = vendor_stack.installed


def freeze_drift(
    lock: Mapping[str, str],
    installed: Mapping[str, str],
    base: Mapping[str, str],
    extras: Mapping[str, str],
    removed: list[str],
) -> list[str]:
    """How the installed set differs from what the build was to install: the lock's pins at their
    versions, the extras (engine, plugin, vendor-only packages) at theirs, the base's own packages
    as they were, and nothing else. One line per package, naming it."""
    lock = {_canonical(k): v for k, v in lock.items()}
    base = {_canonical(k): v for k, v in base.items()}
    extras = {_canonical(k): v for k, v in extras.items()}
    drift = []
    for name, version in sorted(lock.items()):
        have = installed.get(name)
        if have is None:
            drift.append(f"{name}=={version} is in the lock but not installed")
        elif have != version:
            drift.append(f"{name} {have} is installed, the lock says {version}")
    for name, have in sorted(installed.items()):
        if name in lock:
            continue
        if name in extras:
            if extras[name] and have != extras[name]:
                drift.append(f"{name} {have} is installed, the build installs {extras[name]}")
        elif name in base:
            if have != base[name]:
                drift.append(f"{name} {have} is installed over the base's {base[name]} (not in the lock)")
        else:
            drift.append(f"{name} {have} is installed but is not in the lock")
    drift += [
        f"{name} is installed although the matrix removes it" for name in removed if _canonical(name) in installed
    ]
    return drift


def base_replaced(lock: Mapping[str, str], base: Mapping[str, str]) -> list[str]:
    """The base's packages the lock installs at another version (shadowing or replacing them)."""
    base = {_canonical(k): v for k, v in base.items()}
    return [f"{name} {base[name]} → {v}" for name, v in sorted(lock.items()) if base.get(name, v) != v]


def _check_freeze(
    report: InstallReport, install: Mapping[str, Any], image: Mapping[str, Any], expected_engine: str
) -> None:
    """The image's final set against the lock it was built from (any drift fails the build)."""
    try:
        with open(LOCK_TXT, encoding="utf-8") as fh:
            lock = lock_pins(fh.read())
    except OSError:
        report.add("freeze", "skipped", "no lock was used (unlocked build): nothing to compare the installed set with")
        return
    venv = os.environ.get("VIRTUAL_ENV") or sys.prefix
    base = _read_json(os.path.join(venv, ".xcforge-base-packages.json"))
    seen = installed_distributions()
    placeheld = sorted(name for name, (_, placeholder) in seen.items() if placeholder)
    extras = {
        **{str(k): str(v) for k, v in (install.get("lock_extras") or {}).items()},
        str(image.get("engine_package") or "vllm"): expected_engine,
        "xcforge-engine": "",  # our launcher, installed last at the image's own version
    }
    drift = freeze_drift(
        lock, {name: version for name, (version, _) in seen.items()}, base, extras, list(install.get("removed") or [])
    )
    # What the vendor's base ships and the matrix declares (base.provides) the lock may not replace.
    provided = {_canonical(k): str(v) for k, v in (install.get("provided") or {}).items()}
    drift += [
        f"{name} {seen[name][0]} is installed, the base provides {version}"
        for name, version in sorted(provided.items())
        if name in seen and seen[name][0] != version
    ]
    replaced = base_replaced(lock, base)
    if replaced:
        report.add("base", "ok", f"the lock replaces {len(replaced)} of the base's packages: " + ", ".join(replaced))
    if drift:
        report.add(
            "freeze",
            "failed",
            f"the installed set is not the lock {install.get('lock') or ''}: " + "; ".join(drift[:8]),
        )
    else:
        report.add(
            "freeze",
            "ok",
            f"{len(lock)} locked packages at their pins; besides them only the base's packages and "
            + ", ".join(sorted(extras)),
        )
    if placeheld:
        report.add(
            "placeholders",
            "stand-in",
            "empty distributions of the same name and version stand in for: "
            + ", ".join(f"{name} {seen[name][0]}" for name in placeheld),
        )


VENDOR_STACK_JSON = "/etc/xcforge/vendor-stack.json"


def _check_vendor_stack(
    report: InstallReport,
    spec: Mapping[str, Any],
    standin: Mapping[str, Any],
    image: Mapping[str, Any],
    *,
    write: bool,
) -> None:
    """The vendor's stack against the matrix's vendor_image table; what was found goes into image.json."""
    seen = vendor_stack.installed()
    findings = vendor_stack.assert_stack(
        spec, seen, vendor_stack.registered_entry_points(), vendor_stack.site_dirs(), standin or None
    )
    for f in findings:
        report.add(f"vendor:{f.name}", f.status, f.detail)
    if standin:
        report.add("vendor:stand-in", "stand-in", str(standin.get("describes") or "a stand-in of the vendor's image"))
    found = {
        "published": spec.get("published"),
        "entrypoint": spec.get("entrypoint"),
        "asserted": {str(k): vendor_stack.shown_spec(str(v)) for k, v in (spec.get("provides") or {}).items()},
        "found": {
            str(k): (seen.get(vendor_stack.canonical(str(k))) or ("", False))[0] for k in spec.get("provides") or {}
        },
        "checks": [{"name": f.name, "status": f.status, "detail": f.detail} for f in findings],
        "stand_in": bool(standin),
    }
    if not write:
        return  # the smoke test's run (--no-write) of a published image reads, never writes
    with open(VENDOR_STACK_JSON, "w", encoding="utf-8") as fh:
        json.dump(found, fh, indent=2, sort_keys=True)
        fh.write("\n")
    merged = {**dict(image), "vendor_stack": {k: found[k] for k in ("published", "asserted", "found", "stand_in")}}
    with open(IMAGE_JSON, "w", encoding="utf-8") as fh:
        json.dump(merged, fh, sort_keys=True, separators=(",", ":"))
        fh.write("\n")


def _check_general_plugin(report: InstallReport) -> None:
    """vLLM loads our general plugin (AMX permission, xcforge_engine/vllm_plugin.py) in each process."""
    found = {ep.name: ep.value for ep in metadata.entry_points(group="vllm.general_plugins")}
    if found.get("xcforge") == "xcforge_engine.vllm_plugin:register":
        report.add("general-plugin", "ok", "xcforge registers vllm.general_plugins:xcforge")
    else:
        detail = f"no vllm.general_plugins entry point 'xcforge' (found: {sorted(found)})"
        report.add("general-plugin", "failed", detail)


def run_check(
    env: Mapping[str, str], *, timeout: float = 900.0, write: str | None = VERIFICATION_JSON
) -> InstallReport:
    image = _read_json(IMAGE_JSON)
    # What the build did (xcforge-install-engine) over what the matrix says (install-spec.json).
    install = {**_read_json(INSTALL_SPEC_JSON), **_read_json(INSTALL_JSON)}
    report = InstallReport()
    vendor: dict[str, Any] = install.get("vendor_image") or {}
    # A stand-in of the vendor's image declares what its public stack carries in place of the vendor's
    # builds; honoured only where the build itself is a stand-in build (the site skips the vendor's step).
    standin_build = (image.get("plugin_install") or "full") == "skip"
    standin = _read_json(vendor_stack.STANDIN_STACK_JSON) if vendor and standin_build else {}
    deps = "vendor-image" if vendor else (install.get("lock_status") or "unlocked")
    report.level = "deps-resolved" if deps in ("locked", "partial", "vendor-image") else "rendered"

    if (image.get("engine_install") or "full") == "skip":
        report.add("engine", "skipped", install.get("engine_reason") or "engine install skipped for this platform")
    else:
        compiled = (image.get("engine") or "vllm") != "vllm"
        ok, found, note = _run_binaries(install.get("binaries"), timeout) if compiled else _import_engine(timeout)
        # What xcforge-install-engine installed: the matrix's pin, or its engine.fallback pairing.
        expected = (
            env.get("XCFORGE_ENGINE_VERSION") or install.get("engine_version") or image.get("engine_version") or ""
        )
        if install.get("fallback"):
            report.add(
                "pins",
                "stand-in",
                f"engine.fallback pairing {expected} from PyPI, "
                f"not the production pin {image.get('engine_pinned') or '?'}",
            )
        if compiled:
            # Its sources' release (the sdist) has no version to compare with the binary's build number.
            report.add("run", "ok" if ok else "failed", f"{found} (from {install.get('sources') or 'its sources'})")
        elif not ok:
            report.add("import", "failed", found)
        elif vendor:
            # The vendor's build of vLLM: its version is asserted with the rest of its stack below.
            report.add("import", "ok", f"vllm {found} imports (python {sys.version.split()[0]}){note}")
        elif _public(found) != _public(expected):
            report.add("import", "failed", f"vllm {found} imported, the matrix says {expected}")
        else:
            report.add("import", "ok", f"vllm {found} imports (python {sys.version.split()[0]}){note}")
        allowed = [*(install.get("pip_check_allow") or []), *(standin.get("pip_check_allow") or [])]
        # Removed on purpose (remove_packages, with the reason in matrix.yaml) or left out by the site.
        absent = [*(install.get("removed") or []), *(install.get("omitted") or [])]
        unexpected, accepted = pip_check_problems(allowed, absent)
        if unexpected:
            report.add("pip-check", "failed", "; ".join(unexpected[:5]))
        else:
            detail = "clean" if not accepted else f"clean but for {len(accepted)} accepted: " + "; ".join(accepted)
            report.add("pip-check", "ok", detail)
        if vendor:
            _check_vendor_stack(report, vendor, standin, image, write=bool(write))
        else:
            _check_freeze(report, install, image, expected)
        if not compiled:
            _check_general_plugin(report)
        if not report.failed:
            report.level = "engine-installed"
        plugin, entry = image.get("plugin") or "", install.get("plugin_entry_point") or ""
        if plugin and (image.get("plugin_install") or "full") == "skip":
            report.add("plugin", "skipped", install.get("plugin_reason") or f"{plugin} install skipped")
        elif plugin:
            names = {ep.name for ep in metadata.entry_points(group="vllm.platform_plugins")}
            if entry in names:
                report.add("plugin", "ok", f"{plugin} registers vllm.platform_plugins:{entry}")
                if not report.failed:
                    report.level = "plugin-installed"
            else:
                report.add(
                    "plugin", "failed", f"no vllm.platform_plugins entry point '{entry}' (found: {sorted(names)})"
                )
        # (no plugin: engine-installed is this image's top build-time level; it claims no plugin)
    for name in install.get("omitted") or []:
        report.add(f"omitted:{name}", "skipped", install.get("index_only_reason") or "left out by the site")
    if write:
        payload = {
            "schema": 1,
            "level": report.level,
            "levels": list(LEVELS),
            "checks": [c.as_dict() for c in report.checks],
            "lock": install.get("lock"),
            "lock_status": deps,
            "python": sys.version.split()[0],
        }
        os.makedirs(os.path.dirname(write), exist_ok=True)
        with open(write, "w", encoding="utf-8") as fh:
            json.dump(payload, fh, indent=2, sort_keys=True)
            fh.write("\n")
    return report


def check_install(env: Mapping[str, str], argv: list[str]) -> int:
    write = None if "--no-write" in argv else VERIFICATION_JSON
    report = run_check(env, write=write)
    if report.failed:
        lines = [f"check-install: {c.name}: {c.detail}" for c in report.failed]
        raise InstallCheckFailed(lines[0], more=lines[1:])
    print(f"check-install: verification level {report.level}")
    return 0
