"""What the launcher can learn about a model without loading it: where it is, its size, its shape."""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path

from xcforge_engine.host import Host
from xcforge_engine.limits import GIB, size_text

DTYPE_BYTES = {
    "float32": 4,
    "float": 4,
    "float16": 2,
    "half": 2,
    "bfloat16": 2,
}
# safetensors element types; floating ones are converted to the served dtype at load, packed
# integer (quantized) ones are kept as they are.
_ST_BYTES = {
    "F64": 8,
    "F32": 4,
    "F16": 2,
    "BF16": 2,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "I64": 8,
    "I32": 4,
    "I16": 2,
    "I8": 1,
    "U8": 1,
    "BOOL": 1,
}
_ST_FLOATS = {"F32", "F16", "BF16"}
_MAX_HEADER = 100 * (1 << 20)


def is_local(model: str) -> bool:
    """Hub ids look like `org/name`; anything absolute or explicitly relative is a path."""
    return model.startswith(("/", "./", "../", "~")) or model in (".", "..")


@dataclass(frozen=True)
class LocalModel:
    path: str  # container path
    directory: Path | None  # where it lies under the host root, when a directory

    def config(self) -> dict[str, object] | None:
        if self.directory is None:
            return None
        try:
            loaded = json.loads((self.directory / "config.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return loaded if isinstance(loaded, dict) else None


def model_problems(host: Host, model: str) -> tuple[list[str], list[str]]:
    """(errors, warnings) about a local model path, each one sentence naming the fix."""
    if not is_local(model):
        return [], []
    path = os.path.expanduser(model) if model.startswith("~") else model
    if not host.exists(path):
        return [
            f"model path {model} does not exist in the container: mount the model directory with "
            f"`-v /path/on/host:{path}:ro` (and pass --model {path})"
        ], []
    if not host.readable(path):
        return [
            f"model path {model} is not readable by uid {os.geteuid()}: make it readable on the host "
            "(chmod -R a+rX) or run the container with --user matching its owner"
        ], []
    warnings: list[str] = []
    if host.is_dir(path) and not any(
        host.exists(f"{path.rstrip('/')}/{name}") for name in ("config.json", "params.json")
    ):
        warnings.append(
            f"model directory {model} has no config.json: mount the directory that holds the model's "
            "config.json and weights"
        )
    return [], warnings


def local_model(host: Host, model: str | None) -> LocalModel | None:
    if not model or not is_local(model):
        return None
    path = os.path.expanduser(model) if model.startswith("~") else model
    directory = host.path(path)
    return LocalModel(path=path, directory=directory if directory.is_dir() else None)


def _safetensors_tensors(path: Path) -> list[tuple[str, int]] | None:
    """(dtype, nbytes) of each tensor, from the file's JSON header only."""
    try:
        with path.open("rb") as handle:
            (length,) = struct.unpack("<Q", handle.read(8))
            if length > _MAX_HEADER:
                return None
            header = json.loads(handle.read(length))
    except (OSError, ValueError, struct.error):
        return None
    tensors: list[tuple[str, int]] = []
    for name, meta in header.items():
        if name == "__metadata__" or not isinstance(meta, dict):
            continue
        start, end = meta.get("data_offsets", (0, 0))
        tensors.append((str(meta.get("dtype", "")), int(end) - int(start)))
    return tensors


def weight_bytes(
    model: LocalModel | None, served_dtype: str | None, params_b: float | None, quantization: str | None
) -> tuple[int, str]:
    """Memory the weights take once loaded as `served_dtype`, and how that was worked out."""
    served = DTYPE_BYTES.get((served_dtype or "").lower())
    if model is not None and model.directory is not None:
        files = sorted(model.directory.glob("*.safetensors"))
        if files:
            total = 0
            converted = False
            for file in files:
                tensors = _safetensors_tensors(file)
                if tensors is None:
                    total += file.stat().st_size
                    continue
                for dtype, nbytes in tensors:
                    if served and dtype in _ST_FLOATS and _ST_BYTES[dtype] != served:
                        total += nbytes * served // _ST_BYTES[dtype]
                        converted = True
                    else:
                        total += nbytes
            note = f" as {served_dtype}" if converted else ""
            return total, f"weights {size_text(total)}{note} from {len(files)} safetensors file(s) in {model.path}"
        others = [p for ext in ("*.bin", "*.pt", "*.gguf") for p in model.directory.glob(ext)]
        if others:
            total = sum(p.stat().st_size for p in others)
            return total, f"weights {size_text(total)} from the sizes of {len(others)} weight file(s) in {model.path}"
    if params_b:
        if quantization in ("gptq", "awq"):
            per_param, how = 0.6, "4-bit quantized, ~0.6 bytes/parameter"
        else:
            per_param, how = float(served or 2), f"{served or 2} bytes/parameter"
        total = int(params_b * 1e9 * per_param)
        return total, f"weights ~{size_text(total)} from the preset's {params_b:g}B parameters ({how})"
    return 0, "weights not counted (model size unknown: not a local directory and no preset)"


@dataclass(frozen=True)
class KvShape:
    layers: int
    kv_heads: int
    head_dim: int
    max_positions: int | None

    def bytes_per_token(self, dtype_bytes: int) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim * dtype_bytes


def _int(config: dict[str, object], *keys: str) -> int | None:
    for key in keys:
        value = config.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def kv_shape(config: dict[str, object] | None) -> KvShape | None:
    """KV-cache geometry from a Hugging Face config (Llama/Qwen names, ChatGLM's own names)."""
    if not config:
        return None
    text = config.get("text_config")
    if isinstance(text, dict):
        config = {**config, **text}
    layers = _int(config, "num_hidden_layers", "num_layers", "n_layer")
    heads = _int(config, "num_attention_heads", "n_head")
    kv_heads = _int(config, "num_key_value_heads", "multi_query_group_num") or heads
    head_dim = _int(config, "head_dim", "kv_channels")
    hidden = _int(config, "hidden_size", "n_embd")
    if head_dim is None and hidden and heads:
        head_dim = hidden // heads
    if not (layers and kv_heads and head_dim):
        return None
    return KvShape(layers, kv_heads, head_dim, _int(config, "max_position_embeddings", "seq_length"))


def max_len_for_kv(shape: KvShape, kv_gib: int, dtype_bytes: int) -> tuple[int, int]:
    """(tokens the KV cache holds, a --max-model-len that fits): multiples of 1024 above 2048, else 16."""
    tokens = kv_gib * GIB // shape.bytes_per_token(dtype_bytes)
    step = 1024 if tokens >= 2048 else 16
    return tokens, max(16, tokens // step * step)
