"""tools/make_tiny_model.py: a servable random Llama, written without torch."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TOOL = REPO / "tools" / "make_tiny_model.py"

tokenizers = pytest.importorskip("tokenizers")
safetensors = pytest.importorskip("safetensors")


def make(out: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(TOOL), str(out), *args], check=True, capture_output=True, text=True)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("tiny")
    make(out)
    return out


def test_files_and_size(tiny):
    names = {p.name for p in tiny.iterdir()}
    assert {
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        "generation_config.json",
    } <= names
    total = sum(p.stat().st_size for p in tiny.iterdir())
    assert 500_000 < total < 8_000_000  # a few MB
    assert (tiny / "model.safetensors").stat().st_mode & 0o044 == 0o044  # readable by a container's other uid


def test_config_is_a_small_llama_with_a_cpu_supported_head_size(tiny):
    config = json.loads((tiny / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert config["num_hidden_layers"] == 2
    assert 64 <= config["hidden_size"] <= 128
    assert config["head_dim"] == config["hidden_size"] // config["num_attention_heads"] == 32
    assert config["max_position_embeddings"] == 2048
    assert config["torch_dtype"] in ("float32", "bfloat16")
    assert 256 <= config["vocab_size"] <= 1000


def test_tokenizer_loads_and_matches_the_embedding(tiny):
    tok = tokenizers.Tokenizer.from_file(str(tiny / "tokenizer.json"))
    config = json.loads((tiny / "config.json").read_text())
    assert tok.get_vocab_size() == config["vocab_size"]
    for text in ("Hello, world!", "你好，世界 🎉", "naïve café\n\tdef f(): pass"):
        encoded = tok.encode(text)
        assert max(encoded.ids) < config["vocab_size"]
        assert tok.decode(encoded.ids) == text  # byte-level: any text round-trips
    specials = json.loads((tiny / "tokenizer_config.json").read_text())
    for key in ("bos_token", "eos_token", "pad_token"):
        assert tok.token_to_id(specials[key]) is not None
    assert tok.token_to_id(specials["eos_token"]) == config["eos_token_id"]


def test_safetensors_header_shapes_match_config(tiny):
    from safetensors.numpy import load_file

    config = json.loads((tiny / "config.json").read_text())
    tensors = load_file(str(tiny / "model.safetensors"))
    hidden, inter, vocab = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    q = config["num_attention_heads"] * config["head_dim"]
    kv = config["num_key_value_heads"] * config["head_dim"]
    expected = {
        "model.embed_tokens.weight": (vocab, hidden),
        "model.norm.weight": (hidden,),
        "lm_head.weight": (vocab, hidden),
    }
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}"
        expected |= {
            f"{p}.self_attn.q_proj.weight": (q, hidden),
            f"{p}.self_attn.k_proj.weight": (kv, hidden),
            f"{p}.self_attn.v_proj.weight": (kv, hidden),
            f"{p}.self_attn.o_proj.weight": (hidden, q),
            f"{p}.mlp.gate_proj.weight": (inter, hidden),
            f"{p}.mlp.up_proj.weight": (inter, hidden),
            f"{p}.mlp.down_proj.weight": (hidden, inter),
            f"{p}.input_layernorm.weight": (hidden,),
            f"{p}.post_attention_layernorm.weight": (hidden,),
        }
    assert {name: t.shape for name, t in tensors.items()} == expected
    assert {str(t.dtype) for t in tensors.values()} == {config["torch_dtype"]}


def test_chat_template_renders_chatml(tiny):
    jinja2 = pytest.importorskip("jinja2")
    template = json.loads((tiny / "tokenizer_config.json").read_text())["chat_template"]
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "Hi"}]},
    ]
    rendered = jinja2.Environment().from_string(template).render(messages=messages, add_generation_prompt=True)
    assert rendered == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    )


def test_deterministic_for_a_seed(tmp_path, tiny):
    make(tmp_path / "again")
    make(tmp_path / "other", "--seed", "1")
    for name in ("model.safetensors", "tokenizer.json", "config.json"):
        assert (tmp_path / "again" / name).read_bytes() == (tiny / name).read_bytes()
    assert (tmp_path / "other" / "model.safetensors").read_bytes() != (tiny / "model.safetensors").read_bytes()


def test_loads_with_transformers_when_installed(tiny):
    transformers = pytest.importorskip("transformers")
    config = transformers.AutoConfig.from_pretrained(tiny)
    assert config.model_type == "llama"
    tok = transformers.AutoTokenizer.from_pretrained(tiny)
    assert tok.apply_chat_template([{"role": "user", "content": "Hi"}], tokenize=False).startswith("<|im_start|>user")
