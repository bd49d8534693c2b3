#!/usr/bin/env python3
"""Run llama.cpp's convert_hf_to_gguf.py on a model whose BPE pre-tokenizer it does not know.

The converter identifies the pre-tokenizer by hashing the token ids of a fixed text (chkhsh) and
refuses unknown hashes. Our tiny test tokenizer is byte-level BPE like GPT-2, so this wrapper
overrides only that detection to answer "gpt-2" and then runs the converter's own main().

  LLAMA_CPP_DIR=<vendored llama.cpp>  python convert_tiny.py MODEL_DIR --outfile out.gguf --outtype f32
Everything after the script name goes to convert_hf_to_gguf.py unchanged.
"""

import importlib.util
import os
import sys
from pathlib import Path

LLAMA_CPP_DIR = Path(os.environ.get("LLAMA_CPP_DIR", "/tmp/llama/src/llama_cpp_python-0.3.36/vendor/llama.cpp"))
PRE_TOKENIZER = os.environ.get("GGUF_PRE_TOKENIZER", "gpt-2")

# the converter imports `conversion` (next to it) and `gguf` (its gguf-py, not a PyPI gguf)
sys.path.insert(0, str(LLAMA_CPP_DIR))
sys.path.insert(1, str(LLAMA_CPP_DIR / "gguf-py"))

import conversion.base as base  # noqa: E402

owners = [c for c in vars(base).values() if isinstance(c, type) and "get_vocab_base_pre" in vars(c)]
if not owners:
    sys.exit("convert_tiny: no class in conversion.base defines get_vocab_base_pre; converter changed")
for cls in owners:
    setattr(cls, "get_vocab_base_pre", lambda self, tokenizer: PRE_TOKENIZER)  # noqa: B010 - a class found at run time

spec = importlib.util.spec_from_file_location("convert_hf_to_gguf", LLAMA_CPP_DIR / "convert_hf_to_gguf.py")
if spec is None or spec.loader is None:
    sys.exit(f"convert_tiny: cannot load {LLAMA_CPP_DIR / 'convert_hf_to_gguf.py'}")
conv = importlib.util.module_from_spec(spec)
sys.modules["convert_hf_to_gguf"] = conv
spec.loader.exec_module(conv)  # __name__ != "__main__": defines main() only
sys.argv = ["convert_hf_to_gguf.py", *sys.argv[1:]]
conv.main()
