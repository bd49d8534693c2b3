"""What a model is, read from its own files: never typed by hand.

- safetensors (https://github.com/huggingface/safetensors, "Format"): 8 bytes little-endian header
  length N, then N bytes of JSON {tensor: {dtype, shape, data_offsets}, "__metadata__": {...}}.
- config.json (transformers): `architectures`, `torch_dtype`, `quantization_config.quant_method`
  (gptq, awq, ...) and `bits`.
- GGUF (ggml/docs/gguf.md, versions 2 and 3): magic `GGUF`, u32 version, u64 tensor count, u64
  metadata count, the key/value pairs, then the tensor infos (name, dims, type, offset).
  `general.file_type` is llama.cpp's `llama_ftype`.

Only headers are read (a few MiB at most, bounded below): a 70B model's weights are not touched.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from xcforge.errors import ConfigError

SAFETENSORS = "safetensors"
GGUF = "gguf"
_MAX_SAFETENSORS_HEADER = 100 * 1024 * 1024  # the format's own limit
_MAX_GGUF_STRING = 1 << 24
_MAX_GGUF_COUNT = 1 << 24

_SAFETENSORS_DTYPES = {
    "F64": "float64",
    "F32": "float32",
    "F16": "float16",
    "BF16": "bfloat16",
    "F8_E4M3": "float8_e4m3",
    "F8_E5M2": "float8_e5m2",
    "I64": "int64",
    "I32": "int32",
    "I16": "int16",
    "I8": "int8",
    "U8": "uint8",
    "BOOL": "bool",
}
# llama.cpp's llama_ftype (include/llama.h); the GGUF file type operators know by name.
GGUF_FILE_TYPES = {
    0: "F32",
    1: "F16",
    2: "Q4_0",
    3: "Q4_1",
    7: "Q8_0",
    8: "Q5_0",
    9: "Q5_1",
    10: "Q2_K",
    11: "Q3_K_S",
    12: "Q3_K_M",
    13: "Q3_K_L",
    14: "Q4_K_S",
    15: "Q4_K_M",
    16: "Q5_K_S",
    17: "Q5_K_M",
    18: "Q6_K",
    19: "IQ2_XXS",
    20: "IQ2_XS",
    21: "Q2_K_S",
    22: "IQ3_XS",
    23: "IQ3_XXS",
    24: "IQ1_S",
    25: "IQ4_NL",
    26: "IQ3_S",
    27: "IQ3_M",
    28: "IQ2_S",
    29: "IQ2_M",
    30: "IQ4_XS",
    31: "IQ1_M",
    32: "BF16",
    36: "TQ1_0",
    37: "TQ2_0",
}


@dataclass(frozen=True)
class ModelFacts:
    format: str  # safetensors | gguf
    architecture: str | None
    parameters: int  # elements stored in the weight tensors (packed ones for GPTQ/AWQ)
    dtype: str | None
    quantization: dict[str, Any] | None  # {"method": "awq", "bits": 4, ...} or {"method": "gguf", "type": "Q4_K_M"}

    def as_dict(self) -> dict[str, Any]:
        return {
            "format": self.format,
            "architecture": self.architecture,
            "parameters": self.parameters,
            "dtype": self.dtype,
            "quantization": self.quantization,
        }


# What to do about a file this reader refuses (the remedy every refusal ends with).
_REDO_SAFETENSORS = "save the weights again with the safetensors library (or pack the directory they came from)"
_REDO_GGUF = "convert it again with llama.cpp's convert_hf_to_gguf.py (or pack its safetensors directory)"
_CHECK_PATH = "check the path and that it is readable"


def read_facts(root: Path, files: Iterable[str]) -> ModelFacts:
    """The facts of the model made of `files` (paths relative to `root`)."""
    names = sorted(files)
    ggufs = [n for n in names if n.endswith(".gguf")]
    tensors = [n for n in names if n.endswith(".safetensors")]
    if ggufs and tensors:
        raise ConfigError(
            f"{root}: holds both GGUF ({ggufs[0]}) and safetensors ({tensors[0]}) weights; pack one model"
        )
    if len(ggufs) > 1:
        raise ConfigError(
            f"{root}: {len(ggufs)} GGUF files ({', '.join(ggufs[:3])}); pack one GGUF per artifact "
            "(split GGUFs are not supported yet)"
        )
    if ggufs:
        return read_gguf(root / ggufs[0])
    if tensors:
        return _safetensors_facts(root, tensors, "config.json" in names)
    raise ConfigError(f"{root}: no *.safetensors or *.gguf file; give a model directory (or a .gguf file)")


def _safetensors_facts(root: Path, tensors: list[str], has_config: bool) -> ModelFacts:
    parameters = 0
    by_dtype: dict[str, int] = {}
    for name in tensors:
        for tensor_dtype, count in read_safetensors_header(root / name):
            parameters += count
            by_dtype[tensor_dtype] = by_dtype.get(tensor_dtype, 0) + count
    config: dict[str, Any] = {}
    if has_config:
        try:
            loaded = json.loads((root / "config.json").read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ConfigError(f"{root / 'config.json'}: not readable JSON ({exc}); fix or remove it") from None
        config = loaded if isinstance(loaded, dict) else {}
    architectures = config.get("architectures")
    architecture = (
        str(architectures[0]) if isinstance(architectures, list) and architectures else config.get("model_type")
    )
    declared = config.get("torch_dtype") or config.get("dtype")
    dtype: str | None = declared if isinstance(declared, str) else None
    if dtype is None and by_dtype:
        floats = {k: v for k, v in by_dtype.items() if k.startswith(("float", "bfloat"))} or by_dtype
        dtype = max(floats, key=lambda k: floats[k])
    quantization = None
    qc = config.get("quantization_config")
    if isinstance(qc, dict) and isinstance(qc.get("quant_method"), str):
        quantization = {"method": qc["quant_method"].lower()}
        for key in ("bits", "group_size", "version", "fmt"):
            if isinstance(qc.get(key), int | str) and not isinstance(qc.get(key), bool):
                quantization[key] = qc[key]
    return ModelFacts(
        SAFETENSORS, architecture if isinstance(architecture, str) else None, parameters, dtype, quantization
    )


def read_safetensors_header(path: Path) -> list[tuple[str, int]]:
    """(dtype, element count) per tensor of one safetensors file."""
    try:
        with path.open("rb") as fh:
            head = fh.read(8)
            if len(head) < 8:
                raise ConfigError(
                    f"{path}: not a safetensors file (shorter than its 8-byte header length); {_REDO_SAFETENSORS}"
                )
            (length,) = struct.unpack("<Q", head)
            if length > _MAX_SAFETENSORS_HEADER:
                raise ConfigError(
                    f"{path}: safetensors header of {length} bytes (limit 100 MiB): not a safetensors file; "
                    f"{_REDO_SAFETENSORS}"
                )
            header = json.loads(fh.read(length))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read it ({exc.strerror or exc}); {_CHECK_PATH}") from None
    except ValueError:
        raise ConfigError(
            f"{path}: its safetensors header is not JSON; the file is damaged or not safetensors"
        ) from None
    if not isinstance(header, dict):
        raise ConfigError(f"{path}: its safetensors header is not a JSON object; {_REDO_SAFETENSORS}")
    out = []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if not isinstance(info, dict) or not isinstance(info.get("shape"), list):
            raise ConfigError(f"{path}: tensor {name!r} has no shape in the safetensors header; {_REDO_SAFETENSORS}")
        count = 1
        for dim in info["shape"]:
            count *= int(dim)
        out.append((_SAFETENSORS_DTYPES.get(str(info.get("dtype")), str(info.get("dtype")).lower()), count))
    return out


# ------------------------------------------------------------------------------------------ GGUF

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9


class _Reader:
    def __init__(self, fh: IO[bytes], path: Path) -> None:
        self.fh, self.path = fh, path

    def take(self, size: int) -> bytes:
        data = self.fh.read(size)
        if len(data) != size:
            raise ConfigError(f"{self.path}: the GGUF header ends early; the file is truncated")
        return data

    def unpack(self, fmt: str) -> Any:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def string(self) -> str:
        length = self.unpack("<Q")
        if length > _MAX_GGUF_STRING:
            raise ConfigError(f"{self.path}: a GGUF string of {length} bytes: not a GGUF file; {_REDO_GGUF}")
        return self.take(length).decode("utf-8", "replace")

    def value(self, kind: int, keep: bool) -> Any:
        if kind in _SCALARS:
            return self.unpack(_SCALARS[kind])
        if kind == _STRING:
            return self.string()
        if kind == _ARRAY:
            item, count = self.unpack("<I"), self.unpack("<Q")
            if count > _MAX_GGUF_COUNT * 16:
                raise ConfigError(f"{self.path}: a GGUF array of {count} items: not a GGUF file; {_REDO_GGUF}")
            if item in _SCALARS and not keep:  # the tokenizer's scores: skipped, not read into memory
                self.fh.seek(struct.calcsize(_SCALARS[item]) * count, 1)
                return None
            values = [self.value(item, keep) for _ in range(count)]
            return values if keep else None
        raise ConfigError(
            f"{self.path}: unknown GGUF value type {kind}: not a GGUF file this reader knows; {_REDO_GGUF}"
        )


def read_gguf(path: Path) -> ModelFacts:
    """Facts from a GGUF file's header: architecture, file type, parameter count from the tensor infos."""
    try:
        with path.open("rb") as fh:
            reader = _Reader(fh, path)
            if reader.take(4) != b"GGUF":
                raise ConfigError(f"{path}: not a GGUF file (no GGUF magic); {_REDO_GGUF}")
            version = reader.unpack("<I")
            if version not in (2, 3):
                raise ConfigError(f"{path}: GGUF version {version}; this reader knows 2 and 3")
            tensors, count = reader.unpack("<Q"), reader.unpack("<Q")
            if tensors > _MAX_GGUF_COUNT or count > _MAX_GGUF_COUNT:
                raise ConfigError(f"{path}: implausible GGUF counts ({tensors} tensors): not a GGUF file; {_REDO_GGUF}")
            meta: dict[str, Any] = {}
            for _ in range(count):
                key = reader.string()
                kind = reader.unpack("<I")
                meta[key] = reader.value(kind, keep=kind != _ARRAY)
            parameters = 0
            for _ in range(tensors):
                reader.string()
                dims = reader.unpack("<I")
                if dims > 8:
                    raise ConfigError(f"{path}: a GGUF tensor with {dims} dimensions: not a GGUF file; {_REDO_GGUF}")
                elements = 1
                for _ in range(dims):
                    elements *= reader.unpack("<Q")
                reader.take(4 + 8)  # ggml type, offset
                parameters += elements
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read it ({exc.strerror or exc}); {_CHECK_PATH}") from None
    file_type = meta.get("general.file_type")
    type_name = GGUF_FILE_TYPES.get(file_type, f"type {file_type}") if isinstance(file_type, int) else None
    architecture = meta.get("general.architecture")
    quantization = {"method": "gguf", "type": type_name} if type_name else None
    dtype = {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}.get(type_name or "", type_name)
    return ModelFacts(GGUF, architecture if isinstance(architecture, str) else None, parameters, dtype, quantization)
