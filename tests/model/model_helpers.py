"""Small real models for the model tests: a safetensors directory and a GGUF file, written byte by
byte to their formats (safetensors' header; GGUF v3 as ggml/docs/gguf.md lays it out), and keys."""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path

from signing.cosign_keys import CosignPrivateKey
from signing.sm2_keys import Sm2PrivateKey


@dataclass(frozen=True)
class KeyFiles:
    sm2_key: Path
    sm2_pub: Path
    cosign_key: Path
    cosign_pub: Path


def write_keys(folder: Path) -> KeyFiles:
    folder.mkdir(parents=True, exist_ok=True)
    sm2, cosign = Sm2PrivateKey.generate(), CosignPrivateKey.generate()
    files = {
        "sm2.key": sm2.to_pem(None),
        "sm2.pub": sm2.public_key.to_pem(),
        "cosign.key": cosign.to_cosign_pem(""),
        "cosign.pub": cosign.public_key.to_pem(),
    }
    for name, data in files.items():
        (folder / name).write_bytes(data)
    return KeyFiles(folder / "sm2.key", folder / "sm2.pub", folder / "cosign.key", folder / "cosign.pub")


def write_safetensors(path: Path, tensors: dict[str, tuple[str, list[int]]], *, seed: int = 0) -> None:
    """tensors: name → (dtype, shape); the data is random bytes of the right size."""
    sizes = {"F32": 4, "F16": 2, "BF16": 2, "I32": 4}
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, (dtype, shape) in tensors.items():
        count = 1
        for dim in shape:
            count *= dim
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + count * sizes[dtype]]}
        offset += count * sizes[dtype]
    raw = json.dumps(header).encode()
    with path.open("wb") as fh:
        fh.write(struct.pack("<Q", len(raw)) + raw)
        fh.write(os.urandom(offset) if seed == 0 else bytes(offset))


def safetensors_model(folder: Path, *, quantization: dict[str, object] | None = None, big: int = 0) -> Path:
    """A model directory: config.json, two shards, a tokenizer file, an empty file, and (with `big`)
    a file of `big` zero bytes (identical chunks)."""
    folder.mkdir(parents=True)
    config: dict[str, object] = {
        "architectures": ["Qwen2ForCausalLM"],
        "model_type": "qwen2",
        "torch_dtype": "bfloat16",
    }
    if quantization:
        config["quantization_config"] = quantization
    (folder / "config.json").write_text(json.dumps(config))
    write_safetensors(folder / "model-00001-of-00002.safetensors", {"embed": ("BF16", [256, 512])})
    write_safetensors(
        folder / "model-00002-of-00002.safetensors", {"lm_head": ("BF16", [256, 512]), "norm": ("F32", [512])}
    )
    (folder / "tokenizer.json").write_text(json.dumps({"model": {"vocab": {"a": 0, "b": 1}}}))
    (folder / "sub").mkdir()
    (folder / "sub" / "empty.txt").write_bytes(b"")
    if big:
        (folder / "zeros.bin").write_bytes(bytes(big))
    return folder


def _s(text: str) -> bytes:
    data = text.encode()
    return struct.pack("<Q", len(data)) + data


def write_gguf(path: Path, *, architecture: str = "llama", file_type: int = 15) -> int:
    """A GGUF v3 file: architecture, file type, a tokenizer array; two tensors. Returns their element count."""
    tensors = [("token_embd.weight", [64, 32]), ("output_norm.weight", [64])]
    out = bytearray(b"GGUF") + struct.pack("<IQQ", 3, len(tensors), 4)
    out += _s("general.architecture") + struct.pack("<I", 8) + _s(architecture)
    out += _s("general.file_type") + struct.pack("<II", 4, file_type)
    out += _s("tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, 3) + _s("<s>") + _s("a") + _s("b")
    out += _s("tokenizer.ggml.scores") + struct.pack("<IIQ", 9, 6, 3) + struct.pack("<fff", 0.0, -1.0, -2.0)
    for name, dims in tensors:
        out += _s(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        out += struct.pack("<IQ", 12, 0)
    out += os.urandom(4096)
    path.write_bytes(bytes(out))
    return 64 * 32 + 64
