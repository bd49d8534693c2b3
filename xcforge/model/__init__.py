"""Models as signed OCI artifacts: read a model's own facts, pack it in chunks, unpack it verified.

`formats.py` reads format, architecture, parameter count, dtype and quantization from the model's
own files (config.json, safetensors headers, the GGUF header); `artifact.py` writes and reads the
artifact (docs/models.md). Beside the flow, like transfer/: no stage imports it.
"""
