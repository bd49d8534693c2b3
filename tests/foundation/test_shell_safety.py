"""No matrix or site value can add a shell command or a Dockerfile instruction (issue 11, item 5).

Values with a grammar (package names, user names, paths, URLs, requirements) are refused when they
carry shell syntax; free text (descriptions, reasons, env values) may carry anything printable and
is quoted on render: parsing each rendered instruction as the shell would, the payload stays one word.
"""

from __future__ import annotations

import copy
import shlex
from pathlib import Path

import pytest
import yaml

from xcforge.config.matrix import parse_matrix
from xcforge.config.site import SiteConfig
from xcforge.errors import ConfigError
from xcforge.render.dockerfile import render_target

REPO = Path(__file__).resolve().parents[2]
RAW = yaml.safe_load((REPO / "matrix.yaml").read_text())
INJECTIONS = ['x; touch /PWNED', "x$(touch /PWNED)", "x`touch /PWNED`", 'x" && touch /PWNED && "', "x\ntouch /PWNED",
              "x' ; touch /PWNED ; '", "x | touch /PWNED", "x && touch /PWNED"]  # fmt: skip


def _with(path: tuple, value) -> dict:
    raw = copy.deepcopy(RAW)
    node = raw
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return raw


# (path into matrix.yaml, how the value is wrapped) for every field with a grammar.
GRAMMAR_FIELDS = [
    (("targets", "cpu", "extra_system_packages"), lambda v: [v]),
    (("targets", "cuda", "vendor_system_packages"), lambda v: [v]),
    (("targets", "cpu", "preload"), lambda v: [v]),
    (("defaults", "runtime", "user", "name"), lambda v: v),
    (("targets", "ascend", "runtime", "user", "groups"), lambda v: [{"name": v, "gid": 1000}]),
    (("targets", "mlu", "python", "bin"), lambda v: v),
    (("targets", "mlu", "python", "venv"), lambda v: v),
    (("targets", "cpu", "engine", "extra_index_urls"), lambda v: [f"https://{v}"]),
    (("targets", "cpu", "engine", "remove_packages"), lambda v: [v]),
    (("targets", "cpu", "engine", "index_only"), lambda v: [v]),
    (("targets", "ascend", "plugin", "requires"), lambda v: [v]),
    (("targets", "ascend", "engine", "build_requirements"), lambda v: [v]),
    (("targets", "cuda", "env_prepend"), lambda v: {"PATH": v}),
    (("targets", "feiteng", "engine", "llama_cpp", "source_dir"), lambda v: v),
    (("targets", "feiteng", "engine", "llama_cpp", "cmake_flags"), lambda v: [v]),
    (("targets", "cpu", "variant"), lambda v: v),
]


@pytest.mark.parametrize("injection", INJECTIONS)
@pytest.mark.parametrize(("path", "wrap"), GRAMMAR_FIELDS, ids=[".".join(p[0]) for p in GRAMMAR_FIELDS])
def test_grammar_fields_refuse_shell_syntax(path, wrap, injection):
    with pytest.raises(ConfigError) as info:
        parse_matrix(_with(path, wrap(injection)), Path("matrix.yaml"))
    message = info.value.message
    assert message.startswith("matrix.yaml")
    field = path[-1] if path[0] == "targets" or path[:2] != ("defaults", "runtime") else "name"
    assert field in message, message


@pytest.mark.parametrize(
    ("field", "value"),
    [("apt_mirror", "http://mirror/ ; touch /PWNED"), ("apt_mirror", "mirror.example"),
     ("pip", {"index_url": "https://x/simple$(touch /PWNED)"}), ("pip", {"extra_index_urls": ["ftp://x"]}),
     ("pip", {"trusted_hosts": ["x; touch /PWNED"]}), ("pip", {"token_env": "X; touch"}),
     ("proxy", {"https": "http://proxy:3128\"; touch /PWNED"}), ("proxy", {"no_proxy": "a b"})],
)  # fmt: skip
def test_site_values_that_reach_build_args_have_a_grammar(field, value):
    with pytest.raises(ValueError, match="is not"):
        SiteConfig.model_validate({field: value})


PAYLOAD = "PAYLOAD a\"b'c;$(touch /PWNED)`id` && rm -rf / | tee \\x"
FREE_TEXT = [
    ("targets", "cpu", "description"),
    ("targets", "cpu", "hardware"),
    ("targets", "cpu", "engine", "version_reason"),
    ("targets", "cpu", "engine", "fallback", "reason"),
    ("targets", "cpu", "cpu_isa", "arm64", "describes"),
    ("targets", "cpu", "cpu_isa_instead"),
]


def _instructions(text: str) -> list[str]:
    """The Dockerfile's instructions with continuation lines joined (comments dropped)."""
    out, current = [], ""
    for line in text.splitlines():
        if not current and (not line.strip() or line.lstrip().startswith("#")):
            continue
        current += line[:-1] + " " if line.endswith("\\") else line
        if not line.endswith("\\"):
            out.append(current)
            current = ""
    return out


@pytest.mark.parametrize("path", FREE_TEXT, ids=[".".join(p) for p in FREE_TEXT])
def test_free_text_renders_as_one_quoted_word(path):
    raw = _with(path, PAYLOAD)
    raw["targets"]["cpu"]["env"] = {"XCFORGE_NOTE": PAYLOAD}
    matrix = parse_matrix(raw, REPO / "matrix.yaml")
    text = render_target(matrix, matrix.targets["cpu"]).text
    hits = [i for i in _instructions(text) if "PAYLOAD" in i]
    assert hits, "the payload was not rendered at all"
    for instruction in hits:
        keyword, _, body = instruction.partition(" ")
        assert keyword in ("RUN", "ENV", "LABEL"), instruction[:80]
        words = shlex.split(body, posix=True)
        carrying = [w for w in words if "PAYLOAD" in w]
        assert carrying and all("touch /PWNED" in w for w in carrying), instruction[:200]
        assert "touch" not in words and "rm" not in words  # never a command word of its own


def test_a_newline_in_free_text_is_refused():
    with pytest.raises(ConfigError, match=r"targets\.cpu\.description: .* one line of text"):
        parse_matrix(_with(("targets", "cpu", "description"), "ok\nRUN touch /PWNED"), Path("matrix.yaml"))
