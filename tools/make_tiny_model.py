#!/usr/bin/env python3
"""Write a tiny random-weight Llama model (a few MB) that vLLM's CPU backend can serve.

    python tools/make_tiny_model.py OUTDIR [--seed 0]

Nothing can download weights from a hub on the build machines, so the image smoke tests serve this
instead: 2 layers, head_dim 32 (a size vLLM's CPU attention supports), a byte-level BPE tokenizer
trained on a few built-in lines (so any text encodes), a ChatML chat template. The output is
deterministic for a given --seed. Its answers are noise; it exists to exercise the serving path.
Never commit the output: it is regenerated in seconds (tests write it into a temporary directory).

Needs numpy, safetensors and tokenizers (the project's dev dependencies), not torch.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

try:
    import numpy as np
    from safetensors.numpy import save_file
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
except ModuleNotFoundError as exc:  # pragma: no cover - depends on the environment
    sys.stderr.write(f"error: {exc.name} is missing; install the dev dependencies (pip install -e '.[dev]')\n")
    sys.exit(3)

BOS, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
SPECIAL_TOKENS = [BOS, IM_START, IM_END]  # ids 0, 1, 2

# Jinja, ChatML; what Qwen-style chat templates produce, which vLLM's chat endpoint renders.
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' -}}"
    "{%- if message['content'] is string -%}{{- message['content'] -}}"
    "{%- else -%}{%- for part in message['content'] -%}"
    "{%- if part['type'] == 'text' -%}{{- part['text'] -}}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)

TRAINING_TEXT = [
    "The quick brown fox jumps over the lazy dog.",
    "Hello, world! How are you today? I am fine, thank you.",
    "vLLM serves large language models with paged attention and continuous batching.",
    "A container runs the server; the health endpoint answers when the model is loaded.",
    "Kunpeng and Phytium are aarch64 processors; Ascend and Cambricon make accelerators.",
    "Numbers: 0 1 2 3 4 5 6 7 8 9 10 42 100 2048 3.14159",
    'JSON looks like {"name": "value", "list": [1, 2, 3], "ok": true}.',
    "def add(a, b):\n    return a + b\n",
    "你好，世界。这是一个很小的模型，用于测试推理服务。",
    "昇腾、寒武纪和飞腾都可以运行这个镜像。",
    "Système, naïve café: UTF-8 text must round-trip through the tokenizer.",
    "user: what is the capital of France? assistant: Paris is the capital of France.",
]


def train_tokenizer(vocab_size: int) -> Tokenizer:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(TRAINING_TEXT * 4, trainer=trainer)
    return tokenizer


def model_config(vocab_size: int, hidden: int, layers: int, heads: int, kv_heads: int, dtype: str) -> dict[str, Any]:
    head_dim = hidden // heads
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": hidden,
        "intermediate_size": hidden * 2,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": 2048,
        "initializer_range": 0.02,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": False,
        "vocab_size": vocab_size,
        "bos_token_id": 0,
        "eos_token_id": 2,
        "pad_token_id": 0,
        "torch_dtype": dtype,
        "use_cache": True,
    }


def random_weights(config: dict[str, Any], seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    dtype = np.float32 if config["torch_dtype"] == "float32" else np.float16
    hidden, inter = config["hidden_size"], config["intermediate_size"]
    q_out = config["num_attention_heads"] * config["head_dim"]
    kv_out = config["num_key_value_heads"] * config["head_dim"]
    vocab = config["vocab_size"]

    def normal(*shape: int) -> np.ndarray:
        return rng.normal(0.0, config["initializer_range"], size=shape).astype(dtype)

    tensors = {"model.embed_tokens.weight": normal(vocab, hidden)}
    for i in range(config["num_hidden_layers"]):
        prefix = f"model.layers.{i}"
        tensors[f"{prefix}.self_attn.q_proj.weight"] = normal(q_out, hidden)
        tensors[f"{prefix}.self_attn.k_proj.weight"] = normal(kv_out, hidden)
        tensors[f"{prefix}.self_attn.v_proj.weight"] = normal(kv_out, hidden)
        tensors[f"{prefix}.self_attn.o_proj.weight"] = normal(hidden, q_out)
        tensors[f"{prefix}.mlp.gate_proj.weight"] = normal(inter, hidden)
        tensors[f"{prefix}.mlp.up_proj.weight"] = normal(inter, hidden)
        tensors[f"{prefix}.mlp.down_proj.weight"] = normal(hidden, inter)
        tensors[f"{prefix}.input_layernorm.weight"] = np.ones(hidden, dtype=dtype)
        tensors[f"{prefix}.post_attention_layernorm.weight"] = np.ones(hidden, dtype=dtype)
    tensors["model.norm.weight"] = np.ones(hidden, dtype=dtype)
    tensors["lm_head.weight"] = normal(vocab, hidden)
    return tensors


def write_model(
    out: Path,
    *,
    seed: int = 0,
    vocab_size: int = 512,
    hidden: int = 128,
    layers: int = 2,
    heads: int = 4,
    kv_heads: int = 2,
    dtype: str = "float32",
) -> dict[str, Any]:
    if hidden % heads or hidden // heads != 32:
        raise ValueError("hidden/heads must be 32: vLLM's CPU attention supports head_dim 32, not arbitrary sizes")
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = train_tokenizer(vocab_size)
    tokenizer.save(str(out / "tokenizer.json"))
    # The embedding covers every id the tokenizer can produce, specials included.
    config = model_config(tokenizer.get_vocab_size(), hidden, layers, heads, kv_heads, dtype)

    weights = out / "model.safetensors"
    save_file(random_weights(config, seed), str(weights), metadata={"format": "pt"})
    # safetensors creates the file 0600; a container running as another uid must read it.
    weights.chmod(0o644)
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS,
        "eos_token": IM_END,
        "pad_token": BOS,
        "unk_token": None,
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": config["max_position_embeddings"],
        "chat_template": CHAT_TEMPLATE,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2) + "\n")
    (out / "special_tokens_map.json").write_text(
        json.dumps({"bos_token": BOS, "eos_token": IM_END, "pad_token": BOS}, indent=2) + "\n"
    )
    generation = {"bos_token_id": 0, "eos_token_id": [2, 0], "pad_token_id": 0, "max_new_tokens": 64}
    (out / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n")
    (out / "README.md").write_text(
        "# tiny random Llama (xcforge test model)\n\n"
        f"Generated by tools/make_tiny_model.py --seed {seed}. Random weights: the output is noise.\n"
        "For serving tests only; regenerate instead of committing.\n"
    )
    return config


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("outdir", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--vocab-size", type=int, default=512, help="BPE vocabulary target (default 512)")
    parser.add_argument("--hidden-size", type=int, default=128, help="64 or 128 (head_dim stays 32)")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--dtype", choices=("float32", "float16"), default="float32")
    opts = parser.parse_args(argv)
    heads = opts.hidden_size // 32
    config = write_model(
        opts.outdir,
        seed=opts.seed,
        vocab_size=opts.vocab_size,
        hidden=opts.hidden_size,
        layers=opts.layers,
        heads=heads,
        kv_heads=max(1, heads // 2),
        dtype=opts.dtype,
    )
    size = sum(p.stat().st_size for p in opts.outdir.iterdir() if p.is_file())
    print(
        f"wrote {opts.outdir}: vocab {config['vocab_size']}, {config['num_hidden_layers']} layers, {size / 1e6:.1f} MB"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
