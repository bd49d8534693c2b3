"""How far each image and platform was proven: one ladder for every report, label and listing.

    rendered → deps-resolved → engine-installed → plugin-installed → served-cpu → device-tested

`rendered`: the Dockerfile exists (always). `deps-resolved`: the committed lock for that platform is
locked or partial (`python build.py deps`). `engine-installed` / `plugin-installed`: the build
installed them and check-install proved them; `engine-installed` is the top build-time rung of a
target without a plugin (cpu, feiteng, cuda): it never claims `plugin-installed`, and the smoke
test raises it to `served-cpu` directly.
`served-cpu`: the smoke test served a model on the CPU. `device-tested`: the smoke test ran on the
real accelerator (hardware runners). A stand-in never claims a rung it skipped: every skip is named
with its reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from xcforge.config.matrix import Matrix, Target
from xcforge.lock import locks, placeholders
from xcforge.records import VerificationRecord


def _skipped_on(mode: str, arch: str) -> bool:
    return mode == "skip" or mode == f"skip-{arch}"


@dataclass
class PlatformVerification:
    platform: str
    level: str
    lock: str  # the lock's status for the vendor's Python: locked | partial | unverified | missing
    skipped: list[str] = field(default_factory=list)  # "step: reason"

    def record(self) -> VerificationRecord:
        """What the build record carries for this platform (the smoke stage raises its level)."""
        return VerificationRecord(self.platform, self.level, self.lock, tuple(self.skipped))


def lock_level(status: str) -> str:
    """The rung a lock status reaches by itself."""
    return "deps-resolved" if status in ("locked", "partial", "vendor-image") else "rendered"


def lock_status(matrix: Matrix, target: Target, platform: str, fallback: bool = False) -> tuple[str, str]:
    """(the set's status, what its engine side needs: "" when locked)."""
    if not target.engine.is_vllm:
        # Compiled from sources whose sha256 the committed pin holds: nothing else to resolve.
        if locks.engine_sdist_pin(matrix, target):
            return "locked", ""
        return "missing", "run `python build.py deps`"
    if target.engine.is_vendor_image:
        # Fixed by the vendor's image; check-install asserts it against vendor_image (no lock to make).
        return "vendor-image", ""
    entry = locks.set_status(matrix, target, platform, fallback=fallback)
    if entry is None:
        return "missing", "run `python build.py deps`"
    if entry.get("status") == "refused":
        return "refused", str(entry.get("refused") or target.refused or "refused in matrix.yaml")
    engine = str(entry.get("engine") or "")
    return entry.get("status", "missing"), "" if engine == "locked" else engine.removeprefix("unverified: ")


def planned(
    matrix: Matrix,
    target: Target,
    platforms: tuple[str, ...],
    *,
    engine_install: str,
    plugin_install: str,
    vendor_packages: str = "full",
    omitted: tuple[str, ...] = (),
    fallback: tuple[str, ...] = (),
) -> list[PlatformVerification]:
    """The level a successful build reaches per platform (check-install fails the build otherwise)."""
    out = []
    for platform in platforms:
        arch = platform.split("/", 1)[1]
        status, engine_note = lock_status(matrix, target, platform, fallback=platform in fallback)
        level = lock_level(status)
        skipped: list[str] = []
        if platform in fallback and target.engine.fallback:
            # Installed and proven, but not the matrix's production pins: every report says so.
            skipped.append(
                f"engine pins: stand-in pairing {target.engine.package} {target.engine.fallback.version} "
                f"instead of {matrix.engine_version(target)} ({target.engine.fallback.reason})"
            )
        if level == "rendered":
            skipped.append(f"lock: {status} ({engine_note})")
        if _skipped_on(engine_install, arch):
            why = engine_note or (
                f"it builds against the plugin's vendor stack, skipped: {target.plugin.needs_vendor}"
                if target.plugin and target.engine_needs_plugin_stack and _skipped_on(plugin_install, arch)
                else "the site skips it (skip_engine_install)"
            )
            skipped.append(f"engine: skipped ({why})")
        else:
            # A target without a plugin tops out at engine-installed: it has no plugin to have installed.
            level = "engine-installed"
            if target.plugin is None:
                pass
            elif _skipped_on(plugin_install, arch):
                skipped.append(_placeholder_note(matrix, target))
            else:
                level = "plugin-installed"
        if target.vendor_system_packages and _skipped_on(vendor_packages, arch):
            skipped.append("vendor apt packages: skipped (only the vendor base has their apt repository)")
        kernels = target.engine.kernel_wheels
        if kernels and _skipped_on(vendor_packages, arch):
            skipped.append(f"kernel wheels: skipped ({', '.join(kernels.installs)}: only {kernels.source} serves them)")
        locked_without = () if platform in fallback else locks.lock_omitted(matrix, target, platform)
        left_out = (*omitted, *(target.engine.index_only if platform in fallback else ()), *locked_without)
        skipped += [
            f"{name}: left out (its build is only on {', '.join(target.engine.extra_index_urls)})"
            for name in dict.fromkeys(left_out)
        ]
        out.append(PlatformVerification(platform, level, status, skipped))
    return out


def _placeholder_note(matrix: Matrix, target: Target) -> str:
    """What a stand-in build installs in the plugin's place, by name (reports never say "installed")."""
    held = placeholders.for_target(matrix, target)
    names = ", ".join(f"{p.name} {p.version}" for p in held)
    return (
        f"plugin: stand-in placeholders for {names} (empty distributions of the same name and version; "
        f"{target.plugin.needs_vendor if target.plugin else ''}); the rest of its closure is installed from the lock"
    )


def label_value(verifications: list[PlatformVerification]) -> str:
    """`linux/amd64=engine-installed linux/arm64=rendered`: one label for a multi-platform build."""
    return " ".join(f"{v.platform}={v.level}" for v in verifications)
