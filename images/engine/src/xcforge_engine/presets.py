"""Model presets: known-good vLLM arguments per model and backend, from the packaged data/presets.json.

A preset expands to flags in layers (family for all backends → family for this backend →
quantization rule for this backend → the preset's tensor-parallel size); the operator's own flags
are applied after, and a flag the operator gives replaces the preset's (see serve.py).
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from xcforge_engine.args import to_argv
from xcforge_engine.errors import UsageError

STATUSES = ("ok", "unverified", "unsupported")


@dataclass(frozen=True)
class PresetSizing:
    """A backend's preset data when data/presets.json has no column for it: declared by its module.

    `like` names a backend whose family arguments and tensor-parallel sizes fit (devices of about
    the same memory); quantization rules are the backend's own (a missing one is unsupported)."""

    like: str
    reference_device: str
    quantization: dict[str, dict[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class Support:
    status: str  # ok | unverified (runs, not checked by us: a warning) | unsupported (refused)
    reason: str = ""


@dataclass(frozen=True)
class Preset:
    name: str
    family: str
    title: str
    model: str | None  # None: the operator must pass --model (no public hub id)
    params_b: float
    quantization: str | None
    tp: dict[str, int]
    note: str | None = None


@dataclass(frozen=True)
class Expansion:
    preset: Preset
    backend: str
    support: Support
    settings: dict[str, object] = field(default_factory=dict)
    note: str | None = None

    def argv(self) -> list[str]:
        return to_argv(self.settings)


@dataclass(frozen=True)
class PresetBook:
    families: dict[str, dict[str, Any]]
    quantization: dict[str, dict[str, Any]]
    reference_devices: dict[str, str]
    presets: dict[str, Preset]
    # The weights format a backend serves (llama.cpp: gguf); every other backend serves safetensors.
    model_formats: dict[str, str] = field(default_factory=dict)

    def get(self, name: str) -> Preset:
        key = name.strip().lower()
        if key in self.presets:
            return self.presets[key]
        close = difflib.get_close_matches(key, list(self.presets), n=3)
        hint = f" Perhaps you meant {', '.join(close)}?" if close else ""
        raise UsageError(f"unknown preset {name!r}.{hint} `xcforge-engine presets` lists them")

    def expand(self, preset: Preset, backend: str, arch: str) -> Expansion:
        args = self.families[preset.family].get("args", {})
        settings: dict[str, object] = {**args.get("all", {}), **args.get(backend, {})}
        support = Support("ok")
        note = preset.note
        have = (
            self.quantization[preset.quantization].get("format", "safetensors")
            if preset.quantization
            else "safetensors"
        )
        want = self.model_formats.get(backend, "safetensors")
        if have != want:
            return Expansion(
                preset,
                backend,
                Support("unsupported", f"{backend} serves {want} weights and this preset is {have}"),
                {},
                note,
            )
        if preset.quantization:
            rule = self.quantization[preset.quantization].get(backend, {"status": "unsupported"})
            status = rule.get("status", "ok")
            reason = rule.get("reason", "")
            if "arch" in rule and arch not in rule["arch"]:
                status = "unsupported"
            if status == "unsupported" and not reason:
                reason = f"{preset.quantization} is not supported on {backend}"
            support = Support(status, reason)
            settings.update(rule.get("args", {}))
            note = rule.get("note") or note
        tp = preset.tp.get(backend, 1)
        if tp > 1:
            settings["tensor-parallel-size"] = tp
        return Expansion(preset, backend, support, settings, note)


def _validate(data: dict[str, Any], backends: tuple[str, ...]) -> None:
    """The packaged file is ours; a mistake in it must fail the tests, not a start in production."""
    BACKENDS = backends
    families = data["families"]
    for fam_name, fam in families.items():
        unknown = set(fam.get("args", {})) - {"all", *BACKENDS}
        if unknown:
            raise ValueError(f"family {fam_name}: unknown args scope(s) {sorted(unknown)}")
    for quant_name, rules in data["quantization"].items():
        for backend, rule in rules.items():
            if backend == "format":
                continue
            if backend not in BACKENDS or rule.get("status", "ok") not in STATUSES:
                raise ValueError(f"quantization {quant_name}.{backend}: bad backend or status")
    seen: set[str] = set()
    for entry in data["presets"]:
        name = entry["name"]
        if name in seen or name != name.lower():
            raise ValueError(f"preset {name}: duplicate or not lower-case")
        seen.add(name)
        if entry["family"] not in families:
            raise ValueError(f"preset {name}: unknown family {entry['family']}")
        if entry.get("quantization") and entry["quantization"] not in data["quantization"]:
            raise ValueError(f"preset {name}: unknown quantization {entry['quantization']}")
        if not set(entry["tp"]) <= set(BACKENDS):
            raise ValueError(f"preset {name}: tp names an unknown backend (known: {BACKENDS})")


def _add_declared(data: dict[str, Any], declared: Mapping[str, PresetSizing | None]) -> None:
    """Fill in the columns of backends that declare their sizing (`presets`) instead of having one."""
    for name, sizing in declared.items():
        if sizing is None or name in data["reference_devices"]:
            continue
        data["reference_devices"][name] = sizing.reference_device
        for fam in data["families"].values():
            args = fam.get("args", {})
            if sizing.like in args and name not in args:
                args[name] = dict(args[sizing.like])
        for quant_name, rules in data["quantization"].items():
            rules.setdefault(
                name,
                sizing.quantization.get(
                    quant_name, {"status": "unsupported", "reason": f"{quant_name} is not declared for {name}"}
                ),
            )
        for entry in data["presets"]:
            if sizing.like in entry["tp"] and name not in entry["tp"]:
                entry["tp"][name] = entry["tp"][sizing.like]


def load_presets(declared: Mapping[str, PresetSizing | None]) -> PresetBook:
    """The packaged presets for the backends in `declared` (name → the sizing a backend declares, or
    None: its column is in data/presets.json). The backends package passes them
    (`backends.preset_book`): this module does not import the backends, which import it."""
    text = resources.files("xcforge_engine").joinpath("data/presets.json").read_text(encoding="utf-8")
    data = json.loads(text)
    _add_declared(data, declared)
    _validate(data, tuple(declared))
    presets = {
        entry["name"]: Preset(
            name=entry["name"],
            family=entry["family"],
            title=data["families"][entry["family"]]["title"],
            model=entry.get("model"),
            params_b=float(entry["params_b"]),
            quantization=entry.get("quantization"),
            tp={k: int(v) for k, v in entry["tp"].items()},
            note=entry.get("note"),
        )
        for entry in data["presets"]
    }
    return PresetBook(
        data["families"], data["quantization"], data["reference_devices"], presets, data.get("model_formats", {})
    )
