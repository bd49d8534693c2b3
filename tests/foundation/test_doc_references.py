"""Every repository path, cited doc and Python module the prose names exists (issue 22 item 1).

The prose is what people read instead of the code: every tracked `*.md`, the comments and
docstrings of every tracked `*.py`, and the comments of the shell scripts (`scripts/`, `.ci/run`,
`images/support/`, `deploy/policy/*.sh`) and of the Dockerfiles under `tools/`. In it:

1. a path that starts with one of the repository's top-level directories (`xcforge/…`,
   `images/<target>/Dockerfile`, `.github/workflows/…`) names a tracked file or directory;
   `<placeholder>`, `*`, `…` (or `...`) and `{a,b}` are patterns that must match at least one;
2. a bare file name ending in `.md` or `.py` is the name of a tracked file (a document outside the
   repository is cited by whose it is and listed in EXTERNAL, or not cited);
3. a keyless signing identity (`https://github.com/ORG/REPO/.github/workflows/<name>.yml@ref`)
   names a tracked workflow that signs keyless;
4. a dotted `xcforge.…`, `xcforge_engine.…`, `ocicore.…` or `signing.…` name resolves to a module,
   followed by at most a name that module defines.

A path under a directory that is not the repository's (`dist/…`, `/etc/xcforge/…`, `../shared/…`,
a URL) is out of scope: the scan only looks at tokens that begin at a word boundary.
"""

from __future__ import annotations

import functools
import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

TOP_DIRS = (
    "xcforge", "ocicore", "signing", "images", "templates", "tests", "scripts", "docs", "bench",
    "tools", "deploy", "sites", ".github", ".ci",
)  # fmt: skip
MODULE_ROOTS = {
    "xcforge": "xcforge",
    "xcforge_engine": "images/engine/src/xcforge_engine",
    "ocicore": "ocicore",
    "signing": "signing",
}

# A path token: begins where no path or word character precedes it (so not inside a URL,
# `../shared/…`, `$OUT/docs/` or `dist/images/`), and runs over path characters and placeholders.
_PATH = re.compile(r"(?<![\w./~$@:-])(?P<path>(?:" + "|".join(re.escape(d) for d in TOP_DIRS) + r")/[\w.\-/<>*{},…+]*)")
_BARE_FILE = re.compile(r"(?<![\w./~$*-])(?P<name>[A-Za-z0-9_][\w-]*\.(?:md|py))(?![\w/-])")
_MODULE = re.compile(r"(?<![\w./-])(?P<name>(?:" + "|".join(MODULE_ROOTS) + r")(?:\.[A-Za-z_]\w*)+)(?![\w-]|\.\w)")
# File names that end a dotted token: `signing.md` is a document, not the module `signing.md`.
_NOT_MODULES = re.compile(r"\.(md|py|pyc|yaml|yml|json|toml|txt|sh|j2|hcl|log|key|pub|tar|io|org|com|cn)$")

# What the prose cites that is not this repository's, and whose it is. A stale citation of a file
# that used to be here does not belong in this list: fix the prose.
EXTERNAL = {
    "report.md": "dist/report.md, the build report xcforge writes",
    "setup.py": "an sdist's own build script (vLLM's, a plugin's)",
    "convert_hf_to_gguf.py": "llama.cpp's converter, in its sdist",
    "versioning_policy.md": "vllm-ascend's documentation",
    "SIGNATURE_SPEC.md": "cosign's specification",
    "protocol.md": "secure-systems-lab/dsse's specification",
    "docs/installation.md": "MooreThreads/vllm-musa's documentation (cited by matrix.yaml)",
    "xcforge/xcforge": "the GitHub repository that publishes (docs/ci.md)",
}


def _git(*args: str) -> list[str]:
    out = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if line]


@functools.cache
def tracked() -> tuple[str, ...]:
    files = set(_git("ls-files")) | set(_git("ls-files", "--others", "--exclude-standard"))
    return tuple(sorted(f for f in files if (REPO / f).is_file()))


@functools.cache
def existing() -> frozenset[str]:
    """Every tracked file and every directory above one."""
    found: set[str] = set()
    for f in tracked():
        parts = f.split("/")
        found.update("/".join(parts[:i]) for i in range(1, len(parts) + 1))
    return frozenset(found)


# --------------------------------------------------------------------------- the prose


# Python's comments and strings, in one pass (tokenize and ast take a second for the repository):
# a comment, a triple-quoted string, or a one-line string (skipped: code, not prose).
_PY_LEX = re.compile(
    r"(?P<comment>#[^\n]*)"
    r"|(?P<triple>(?:[rRbBuUfF]{1,2})?(?P<q3>\"\"\"|''')(?P<body>[\s\S]*?)(?<!\\)(?P=q3))"
    r"|(?:[rRbBuUfF]{1,2})?(?P<q1>[\"'])(?:\\.|(?!(?P=q1))[^\\\n])*(?P=q1)"
)


def _python_prose(text: str) -> str:
    """Comments and docstrings of a Python file: a triple-quoted string that starts a line and
    follows a line ending in `:` (def, class) or only comments (the module's)."""
    pieces = []
    for m in _PY_LEX.finditer(text):
        if m.group("comment"):
            pieces.append(m.group("comment"))
        elif m.group("triple"):
            start = text.rfind("\n", 0, m.start()) + 1
            if text[start : m.start()].strip():
                continue  # inside an expression: a value, not a docstring
            before = text[:start]
            previous = re.sub(r"#[^\n]*$", "", before.rstrip()).rstrip()
            if previous.endswith(":") or re.fullmatch(r"(?:\s*#[^\n]*)*\s*", before):
                pieces.append(m.group("body"))
    return "\n".join(pieces)


_SHELL_COMMENT = re.compile(r"(?:^|(?<=\s))#(?![!{])(.*)$", re.M)


def _hash_comments(text: str) -> str:
    """`# …` comments of a shell script or Dockerfile (whole-line and trailing)."""
    return "\n".join(m.group(1) for m in _SHELL_COMMENT.finditer(text))


def _is_shell(path: str) -> bool:
    return (
        (path.startswith("scripts/") and path.endswith(".sh"))
        or path == ".ci/run"
        or path.startswith("images/support/")
        or (path.startswith("deploy/") and path.endswith(".sh"))
    )


def prose() -> dict[str, str]:
    """Path → the prose of it that the checks read."""
    out = {}
    for path in tracked():
        if path.endswith(".md"):
            extract = None
        elif path.endswith(".py"):
            extract = _python_prose
        elif _is_shell(path) or (path.startswith("tools/") and Path(path).name == "Dockerfile"):
            extract = _hash_comments
        else:
            continue
        text = (REPO / path).read_text(encoding="utf-8")
        out[path] = extract(text) if extract else text
    return out


# --------------------------------------------------------------------------- the checks


def _pattern(token: str) -> re.Pattern[str] | None:
    """A token with placeholders as a regex over repository paths, or None for a plain path."""
    token = token.replace("...", "…")
    if not re.search(r"<[^>]*>|\*|…|\{[^}]*\}", token):
        return None
    out, i = "", 0
    while i < len(token):
        c = token[i]
        if c == "<" and ">" in token[i:]:
            i = token.index(">", i) + 1
            out += r"[^/]+"
        elif c == "{" and "}" in token[i:]:
            j = token.index("}", i)
            inner = token[i + 1 : j]  # {a,b}: either; {name}: a format field, any one segment
            out += "(?:" + "|".join(map(re.escape, inner.split(","))) + ")" if "," in inner else r"[^/]+"
            i = j + 1
        elif c == "*":
            out += r"[^/]*"
            i += 1
        elif c == "…":
            out += r".*"
            i += 1
        else:
            out += re.escape(c)
            i += 1
    return re.compile(out)


def _clean(token: str) -> str:
    token = token.rstrip(".,:;)")
    # An unbalanced placeholder cut by the line's end or a sentence: keep what comes before it.
    for opener, closer in (("<", ">"), ("{", "}")):
        if token.count(opener) > token.count(closer):
            token = token[: token.rindex(opener)]
    return token.rstrip("/") or token


def path_exists(token: str) -> bool:
    token = _clean(token)
    pattern = _pattern(token)
    if pattern is None:
        return token in existing()
    return any(pattern.fullmatch(p) for p in existing())


def missing_paths(text: str) -> set[str]:
    found = set()
    for m in _PATH.finditer(text):
        if re.match(r":\w|@sha256", text[m.end() : m.end() + 8]):
            continue  # an image reference: xcforge/vllm-cpu:0.32.0-cpu
        if not path_exists(m.group("path")) and _clean(m.group("path")) not in EXTERNAL:
            found.add(_clean(m.group("path")))
    return found


@functools.cache
def _names() -> frozenset[str]:
    return frozenset(Path(p).name for p in tracked())


def missing_docs(text: str) -> set[str]:
    names = _names()
    return {m.group("name") for m in _BARE_FILE.finditer(text)} - names - EXTERNAL.keys()


_WORKFLOW_IDENTITY = re.compile(r"/(?P<path>\.github/workflows/[\w.-]+\.ya?ml)@")


def wrong_identities(text: str) -> set[str]:
    """Workflow identities (in URLs, which the path check skips) that name no workflow signing
    with `--keyless`."""
    found = set()
    for m in _WORKFLOW_IDENTITY.finditer(text):
        path = m.group("path")
        if path not in existing() or "--keyless" not in (REPO / path).read_text(encoding="utf-8"):
            found.add(path)
    return found


@functools.cache
def _module_text(path: str) -> str:
    return (REPO / path).read_text(encoding="utf-8")


def module_resolves(name: str) -> bool:
    """`a.b.c.d`: the longest prefix that is a module file or package, then at most one name it
    defines (a function, class, constant or imported name)."""
    root, *rest = name.split(".")
    base = MODULE_ROOTS[root]
    module, i = f"{base}/__init__.py", 0
    while i < len(rest):
        candidate = f"{module.rsplit('/', 1)[0]}/{rest[i]}"
        if (REPO / candidate / "__init__.py").is_file():
            module, i = f"{candidate}/__init__.py", i + 1
        elif (REPO / f"{candidate}.py").is_file():
            module, i = f"{candidate}.py", i + 1
            break
        else:
            break
    left = rest[i:]
    if not left:
        return True
    if len(left) > 2 or not module.endswith(".py"):
        return False
    # A name the module defines, then possibly an attribute of it (Class.method).
    return re.search(rf"(?m)^\s*(?:async def |def |class )?{re.escape(left[0])}\b", _module_text(module)) is not None


def unresolved_modules(text: str) -> set[str]:
    found = set()
    for m in _MODULE.finditer(text):
        name = m.group("name")
        if _NOT_MODULES.search(name):
            continue
        if not module_resolves(name):
            found.add(name)
    return found


def test_the_scan_reads_every_kind_of_prose():
    texts = prose()
    assert "README.md" in texts and "xcforge/shell.py" in texts and ".ci/run" in texts
    assert "tools/gguf/Dockerfile" in texts and "scripts/provision.sh" in texts
    # Code is not prose: a string literal of a .py file is not read, its comments are.
    assert "subprocess.run" not in texts["tests/foundation/test_doc_references.py"]


def test_the_checks_catch_what_they_are_for():
    assert missing_paths("see xcforge/plan.py and xcforge/render/dockerfile.py") == {"xcforge/plan.py"}
    assert missing_paths("images/<target>/Dockerfile, images/*/locks/, images/nope/<t>") == {"images/nope/<t>"}
    assert missing_paths("images/engine/.../__init__.py, templates/{Dockerfile,apt}.j2") == set()
    assert missing_paths("docker run xcforge/vllm-cpu:0.32.0-cpu; https://x.org/docs/y; dist/tools/z") == set()
    assert missing_docs("ENVIRONMENT.md, README.md, see docs/engine.md, (plan.py), *_cmds.py") == {
        "ENVIRONMENT.md",
        "plan.py",
    }
    assert wrong_identities("https://github.com/O/R/.github/workflows/build.yml@refs/heads/main") == {
        ".github/workflows/build.yml"
    }
    assert wrong_identities("https://github.com/O/R/.github/workflows/ci.yml@refs/heads/main") == {
        ".github/workflows/ci.yml"
    }
    assert wrong_identities("https://github.com/O/R/.github/workflows/release.yml@refs/tags/v1") == set()
    assert unresolved_modules("xcforge.config.matrix.engine_backends, xcforge_engine.backends.cpu") == set()
    assert unresolved_modules("xcforge.plan_gone, ocicore.push.nothing_here, signing.md") == {
        "xcforge.plan_gone",
        "ocicore.push.nothing_here",
    }


def test_prose_names_only_paths_docs_and_modules_that_exist():
    stale = []
    for path, text in prose().items():
        stale += [f"{path}: path {t}" for t in sorted(missing_paths(text))]
        stale += [f"{path}: document {t}" for t in sorted(missing_docs(text))]
        stale += [f"{path}: module {t}" for t in sorted(unresolved_modules(text))]
        stale += [f"{path}: keyless identity of {t}" for t in sorted(wrong_identities(text))]
    assert not stale, "prose names what is not in the repository:\n" + "\n".join(stale)


# --------------------------------------------------------------------------- facts the prose states
# Issue 33 item 5: counts and orders the prose states, checked against the code they describe.

_NUMBER_WORDS = ("one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")
_BACKEND_COUNT = re.compile(r"\b(?P<n>" + "|".join(_NUMBER_WORDS) + r") (?:engine )?(?:backends|kinds of hardware)\b")


def engine_backends() -> list[str]:
    folder = REPO / "images/engine/src/xcforge_engine/backends"
    return sorted(p.stem for p in folder.glob("*.py") if p.stem not in {"__init__", "base"})


def stated_backend_counts(text: str) -> list[int]:
    return [_NUMBER_WORDS.index(m.group("n")) + 1 for m in _BACKEND_COUNT.finditer(text)]


def test_the_prose_counts_the_engine_backends_there_are():
    assert stated_backend_counts("one matrix, four kinds of hardware; all six engine backends") == [4, 6]
    count = len(engine_backends())
    wrong = [f"{path}: says {n}" for path, text in prose().items() for n in stated_backend_counts(text) if n != count]
    assert not wrong, f"there are {count} engine backends ({', '.join(engine_backends())}):\n" + "\n".join(wrong)


_TOOLS = ("docker", "buildx", "openssl", "cosign", "uv", "mmdebstrap", "skopeo", "qemu", "git")


def _environment_messages(source: str) -> str:
    """The text of every `raise EnvironmentProblem(...)` in a module: its string parts, and the
    module-level string constants it names (a shared REMEDY)."""
    import ast

    tree = ast.parse(source)
    constants = {
        t.id: node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
        for t in node.targets
        if isinstance(t, ast.Name)
    }
    parts = []
    for node in ast.walk(tree):
        call = node.exc if isinstance(node, ast.Raise) else None
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "EnvironmentProblem":
            for inner in ast.walk(call):
                if isinstance(inner, ast.Constant) and isinstance(inner.value, str):
                    parts.append(inner.value)
                elif isinstance(inner, ast.Name) and inner.id in constants:
                    parts.append(constants[inner.id])
    return "\n".join(parts)


def _checked_tools() -> set[str]:
    """The tools whose absence some xcforge message reports as EnvironmentProblem (exit 3)."""
    checked: set[str] = set()
    for path in tracked():
        if path.startswith("xcforge/") and path.endswith(".py"):
            text = _environment_messages((REPO / path).read_text())
            checked |= {tool for tool in _TOOLS if re.search(rf"\b{tool}\b", text, re.I)}
    return checked


def test_exit_code_3_names_only_tools_a_step_checks():
    row = next(line for line in (REPO / "README.md").read_text().splitlines() if line.startswith("| 3 |"))
    named = {tool for tool in _TOOLS if re.search(rf"\b{tool}\b", row, re.I)}
    assert named, row
    assert named <= _checked_tools(), (
        f"README's exit code 3 names {sorted(named - _checked_tools())}, which no step checks"
    )
    assert {"docker", "buildx"} <= _checked_tools()  # the messages are read


def _step(first: str, after: str) -> str:
    text = (REPO / "docs/architecture.md").read_text()
    return text[text.index(first) : text.index(after)]


def _calls_in_order(path: str, function: str, calls: tuple[str, ...]) -> list[str]:
    import ast

    source = (REPO / path).read_text()
    node = next(n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.FunctionDef) and n.name == function)
    body = ast.get_source_segment(source, node) or ""
    return sorted(calls, key=lambda c: body.index(f"{c}("))


def test_the_build_and_push_steps_say_what_the_code_does_in_its_order():
    build = _step("**Build.** `bake.stage.build_all`", "**Publish, record, sign, smoke.**")
    code_order = _calls_in_order("xcforge/bake/stage.py", "_finish", ("replace", "write_attestations"))
    doc_order = sorted(code_order, key=lambda c: build.index(f"{c}`"))
    assert doc_order == code_order, f"docs/architecture.md's build step says {doc_order}; _finish does {code_order}"
    assert "push_layout" not in build  # the bake stage pushes nothing: publish/push.py does

    publish = _step("**Publish, record, sign, smoke.**", "**Report.**")
    code_order = _calls_in_order("xcforge/publish/push.py", "push_built", ("push_layout", "attach_sboms"))
    doc_order = sorted(code_order, key=lambda c: publish.index(f"{c}`"))
    assert doc_order == code_order, f"docs/architecture.md's publish step: {doc_order}; push_built: {code_order}"
