"""Reading and composing vLLM command-line arguments without vLLM's parser.

The operator's arguments are passed through unchanged; the launcher only needs to know which flags
they set (so its own defaults step aside) and the values of a few (--model, --port, -tp). vLLM's
parser accepts `--flag value`, `--flag=value`, underscores for dashes and a few short aliases; the
key of a flag here is its long name without dashes and without a `no-` prefix, so
`--no-enforce-eager` and `--enforce-eager` are the same setting.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

_ALIASES = {
    "-tp": "tensor-parallel-size",
    "-pp": "pipeline-parallel-size",
    "-dp": "data-parallel-size",
    "-q": "quantization",
}
_NUMBER = re.compile(r"-?\d+(\.\d+)?")


def flag_key(token: str) -> str | None:
    """`--max_model_len=4096` → `max-model-len`; values (including `-1`) → None."""
    if not token.startswith("-") or token == "-" or token == "--" or _NUMBER.fullmatch(token):
        return None
    name = token.split("=", 1)[0]
    if name in _ALIASES:
        return _ALIASES[name]
    # -O3, -O.level=3, -O '{...}': vLLM's shorthand for --compilation-config.
    if name.startswith("-O") and not name.startswith("--"):
        return "compilation-config"
    key = name.lstrip("-").replace("_", "-")
    return key.removeprefix("no-")


def flag_keys(args: Sequence[str]) -> set[str]:
    return {key for key in map(flag_key, args) if key}


def get_value(args: Sequence[str], key: str) -> str | None:
    """The value of a value-taking flag; the last occurrence wins, as with argparse."""
    value: str | None = None
    for i, token in enumerate(args):
        if flag_key(token) != key:
            continue
        if "=" in token:
            value = token.split("=", 1)[1]
        elif i + 1 < len(args):
            value = args[i + 1]
    return value


def to_argv(settings: Mapping[str, object]) -> list[str]:
    """{"max-model-len": 8192, "trust-remote-code": True} → ["--max-model-len", "8192", "--trust-remote-code"]."""
    argv: list[str] = []
    for key, value in settings.items():
        if value is True:
            argv.append(f"--{key}")
        elif value is False or value is None:
            continue
        else:
            argv += [f"--{key}", str(value)]
    return argv


def split_positional_model(args: Sequence[str]) -> tuple[str | None, list[str]]:
    """`vllm serve MODEL ...` takes the model first; the API server module only takes --model.

    So `docker run IMAGE /models/x --dtype half` keeps working as it does upstream, a leading
    non-flag argument is the model.
    """
    if args and not args[0].startswith("-"):
        return args[0], list(args[1:])
    return None, list(args)
