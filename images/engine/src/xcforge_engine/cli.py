"""xcforge-engine's entry point: dispatch, and the house way of failing (one line, a stable exit code).

`docker run IMAGE` runs `xcforge-engine serve` (the image's CMD); `docker run IMAGE --model X`
replaces the CMD, so arguments that do not start with a subcommand are serve's, exactly like the
upstream image whose entrypoint is `vllm serve`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import shutil
import sys
import traceback
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import NoReturn, TypedDict

from xcforge_engine import __version__, log
from xcforge_engine.backends import BACKENDS, preset_book, resolve_backend
from xcforge_engine.doctor import build_report, render_text
from xcforge_engine.dtype_probe import affinity_runner, subprocess_runner
from xcforge_engine.environment import truthy
from xcforge_engine.errors import EngineError, UsageError
from xcforge_engine.health import DEFAULT_TIMEOUT, check_health, health_url
from xcforge_engine.host import Host
from xcforge_engine.image import ImageFacts, load_image_facts
from xcforge_engine.install_check import check_install
from xcforge_engine.isa import isa_finding
from xcforge_engine.serve import (
    log_plan,
    parse_serve_args,
    plan_serve,
    prove_binding,
    prove_dtype,
    require_engine,
    write_state,
)
from xcforge_engine.software import Software, detect_software
from xcforge_engine.supervise import run_supervised

USAGE = """\
usage: xcforge-engine [--debug] [serve] [--preset NAME] [--model-key PUB.pem] [--dry-run] [vLLM arguments...]
       xcforge-engine [--debug] doctor [--json] [--model PATH]
       xcforge-engine [--debug] healthcheck [--timeout SECONDS] [--port N | --url URL]
       xcforge-engine [--debug] presets [NAME] [--backend BACKEND] [--json]
       xcforge-engine [--debug] version [--json]
       xcforge-engine [--debug] fetch-model oci://REGISTRY/REPO@sha256:… DIR [--model-key PUB.pem]
       xcforge-engine [--debug] check-install [--no-write]
       xcforge-engine PROGRAM [ARGS...]      (any program on PATH, in the vendor's environment)

Arguments that do not start with a subcommand are serve's: vLLM's own arguments, passed through
unchanged (a leading model path becomes --model); a first argument that names a program on PATH
(`docker run IMAGE python3 -c ...`) runs that program instead. Exit codes: 0 ok, 1 unhealthy or
internal error, 2 usage, 3 preflight/doctor error, 4 no engine in this image (stand-in build),
5 check-install failed, 6 model refused (signature, a file's hash, or it does not fit this image).
--model-key FILE (or XCFORGE_MODEL_KEY): serve only a signed model (a directory `build.py model unpack`
wrote, an oci://REGISTRY/REPO@sha256:… reference or a .model.oci.tar archive) whose
signature and every file verify against that key, before the engine starts (docs/models.md).
Set XCFORGE_DEBUG=1 (or --debug) to see tracebacks."""


class _BackendInfo(TypedDict):
    """One backend's column of a preset (`presets --json`)."""

    status: str
    reason: str
    args: list[str]
    tensor_parallel_size: int


class _PresetRow(TypedDict):
    """One preset of `presets --json`."""

    name: str
    family: str
    title: str
    model: str | None
    params_b: float
    quantization: str | None
    note: str | None
    backends: dict[str, _BackendInfo]


class _Parser(argparse.ArgumentParser):
    """argparse that fails the house way (one line, exit 2) instead of printing usage and exiting."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}")


class Launcher:
    """One invocation: its environment, the root it reads the machine from, and the engine's versions."""

    def __init__(self, env: Mapping[str, str], host: Host, software: Software | None) -> None:
        self.env = env
        self.host = host
        self._software = software
        self.image: ImageFacts = load_image_facts(host, env)

    def software(self) -> Software:
        if self._software is None:
            backend, _ = resolve_backend(self.image, self.env, self.host)
            self._software = detect_software(backend.name, backend.distributions)
        return self._software

    def identity(self) -> str:
        image, software = self.image, self.software()
        engine = image.engine_version or software.vllm or "?"
        plugin = f" + {image.plugin} {image.plugin_version or ''}".rstrip() if image.plugin else ""
        if image.engine_fallback:
            engine += f" (stand-in pairing; the production pin is {image.engine_pinned or '?'})"
        if image.engine_packager:
            engine += f" ({image.packager_note})"
        limits = "".join(f"; {text}" for text in (image.unavailable, image.removed) if text)
        if image.cpu_variants:
            # Which llama.cpp CPU backend the server will load here, and the features that chose it.
            variant = isa_finding(self.host, image)[1]["variant"]
            unread = "CPU features unreadable: llama.cpp picks its CPU backend itself"
            limits += f"; {variant['summary'] if variant else unread}"
        # What serves: vLLM, or llama.cpp's server (image.json `engine`; its version is the sdist's).
        kind = "vLLM"
        if (image.engine or "vllm") != "vllm":
            kind = f"{image.engine} from {image.engine_package or 'its sdist'}"
        return (
            f"xcforge-engine {__version__}: target {image.target or '?'}, {kind} {engine}{plugin}, "
            f"revision {image.build_revision or '?'}{limits}"
        )

    # --- subcommands -------------------------------------------------------------------------------

    def serve(self, argv: Sequence[str]) -> int:
        request = parse_serve_args(argv, self.env)
        software = self.software()
        log.info(self.identity())
        if request.wants_help:
            sys.stderr.write(USAGE + "\n\nvLLM's own arguments follow.\n")
            if not (software.vllm_importable and not self.image.stand_in):
                log.info("vLLM is not installed in this image, so its arguments cannot be listed")
                return 0
        elif not request.dry_run:
            require_engine(self.image, software)
        plan = plan_serve(request, self.env, self.host, self.image, software)
        log_plan(plan)
        if request.dry_run:
            if not plan.engine_ready:
                log.warning("no usable engine in this image: without --dry-run, serve would refuse to start")
            print(json.dumps(plan.as_dict(), indent=2))
            return 0
        plan = prove_dtype(plan, subprocess_runner(plan.argv[0], plan.env), self.host.arch(), self.env)
        plan = prove_binding(plan, affinity_runner(sys.executable, plan.env))
        write_state(plan, self.env)
        if plan.stop_grace:
            log.info(f"run: {shlex.join(plan.argv)} (the launcher stays its parent to stop it cleanly)")
            return run_supervised(plan.argv, plan.env, plan.stop_grace)
        log.info(f"exec: {shlex.join(plan.argv)}")
        try:
            os.execvpe(plan.argv[0], plan.argv, plan.env)
        except OSError as exc:
            raise EngineError(f"cannot start {plan.argv[0]}: {exc.strerror or exc}") from exc
        return 1  # not reached: exec replaced this process

    def doctor(self, argv: Sequence[str]) -> int:
        parser = _Parser(prog="xcforge-engine doctor", add_help=True)
        parser.add_argument("--json", action="store_true", help="machine-readable report (schema_version 1)")
        parser.add_argument("--model", help="also check this model path (default: XCFORGE_MODEL)")
        opts = parser.parse_args(argv)
        report = build_report(
            self.host, self.env, self.image, self.software(), opts.model or self.env.get("XCFORGE_MODEL")
        )
        print(json.dumps(report, indent=2) if opts.json else render_text(report))
        return int(report["exit_code"])

    def fetch_model(self, argv: Sequence[str]) -> int:
        """`fetch-model oci://R/REPO@sha256:… DIR [--model-key PUB]`: the init container's step."""
        from xcforge_engine.modelfetch import empty, fetch, parse
        from xcforge_engine.modelverify import RECORD_DIR, key_paths, load_key, verify_model

        parser = _Parser(prog="xcforge-engine fetch-model", add_help=True)
        parser.add_argument("ref", help="oci://REGISTRY/REPO@sha256:<digest> of a model artifact")
        parser.add_argument("dest", help="a new or empty directory")
        parser.add_argument("--model-key", action="append", default=[], help="verify with this public key (PEM)")
        parser.add_argument("--clean", action="store_true", help="empty DIR first (an init container's emptyDir)")
        opts = parser.parse_args(argv)
        dest = Path(opts.dest)
        paths = key_paths(opts.model_key, self.env)
        keys = [load_key(p) for p in paths]  # a bad key is refused before anything is downloaded
        digest = parse(opts.ref)[2]
        record = dest / RECORD_DIR / "digest"
        if record.is_file() and record.read_text(encoding="ascii").strip() == digest:
            log.info(f"{dest} already holds {digest}: verifying it, not fetching it again")
        else:
            if opts.clean:
                empty(dest)
            fetch(opts.ref, dest, self.env)
        if keys:
            try:
                verified = verify_model(dest, keys, self.env)
            except EngineError:
                empty(dest)  # nothing that failed the check is left to serve
                raise
            log.info(verified.note())
        else:
            log.warning(f"{opts.ref}: fetched without a key; serve --model-key verifies it before starting")
        print(f"{opts.ref} → {dest} ({digest})")
        return 0

    def healthcheck(self, argv: Sequence[str]) -> int:
        parser = _Parser(prog="xcforge-engine healthcheck")
        parser.add_argument("--timeout", type=float, default=None, help=f"seconds (default {DEFAULT_TIMEOUT:g})")
        parser.add_argument("--port", type=int, help="probe 127.0.0.1:PORT instead of serve's recorded address")
        parser.add_argument("--url", help="probe this URL")
        opts = parser.parse_args(argv)
        timeout = opts.timeout
        if timeout is None:
            try:
                timeout = float(self.env.get("XCFORGE_HEALTH_TIMEOUT") or DEFAULT_TIMEOUT)
            except ValueError:
                raise UsageError("XCFORGE_HEALTH_TIMEOUT must be a number of seconds") from None
        url = opts.url or health_url(self.env, opts.port)[0]
        check_health(url, timeout)
        return 0

    def presets(self, argv: Sequence[str]) -> int:
        parser = _Parser(prog="xcforge-engine presets")
        parser.add_argument("name", nargs="?", help="show one preset's arguments on every backend")
        parser.add_argument("--backend", choices=tuple(BACKENDS), help="only this backend")
        parser.add_argument("--json", action="store_true")
        opts = parser.parse_args(argv)
        book = preset_book()
        arch = self.host.arch()
        chosen = [book.get(opts.name)] if opts.name else list(book.presets.values())
        backends = [opts.backend] if opts.backend else list(BACKENDS)
        rows: list[_PresetRow] = []
        for preset in chosen:
            per_backend: dict[str, _BackendInfo] = {}
            for backend in backends:
                expansion = book.expand(preset, backend, arch)
                per_backend[backend] = {
                    "status": expansion.support.status,
                    "reason": expansion.support.reason,
                    "args": expansion.argv(),
                    "tensor_parallel_size": preset.tp.get(backend, 1),
                }
            rows.append(
                {
                    "name": preset.name,
                    "family": preset.family,
                    "title": preset.title,
                    "model": preset.model,
                    "params_b": preset.params_b,
                    "quantization": preset.quantization,
                    "note": preset.note,
                    "backends": per_backend,
                }
            )
        if opts.json:
            print(json.dumps({"arch": arch, "reference_devices": book.reference_devices, "presets": rows}, indent=2))
        elif opts.name:
            print(_preset_detail(rows[0]))
        else:
            print(_preset_table(rows, backends))
        return 0

    def version(self, argv: Sequence[str]) -> int:
        parser = _Parser(prog="xcforge-engine version")
        parser.add_argument("--json", action="store_true")
        opts = parser.parse_args(argv)
        image, software = self.image, self.software()
        installed_software = {
            "vllm": software.vllm,
            "vllm_distribution": software.vllm_distribution,
            "torch": software.torch,
            **software.extras,
        }
        facts = {"xcforge_engine": __version__, **image.as_dict(), "installed": installed_software}
        if opts.json:
            print(json.dumps(facts, indent=2))
        else:
            print(f"xcforge-engine {__version__}")
            for key in ("target", "backend", "engine_version", "plugin", "plugin_version", "build_revision"):
                print(f"{key}: {facts[key] or '-'}")
            if image.base_image:
                print(f"base_image: {image.base_image}{'@' + image.base_digest if image.base_digest else ''}")
            print(f"engine_install: {image.engine_install or '-'}")
            if image.engine_fallback:
                print(f"engine_fallback: {image.engine_fallback}")
            if image.cpu_variants:
                print(f"cpu_variants: {image.cpu_variants}")
            for key in ("engine_packager", "unavailable", "removed"):
                if facts[key]:
                    print(f"{key}: {image.packager_note if key == 'engine_packager' else facts[key]}")
            installed = ", ".join(f"{k} {v}" for k, v in installed_software.items() if v and k != "vllm_distribution")
            print(f"installed: {installed or 'no vLLM or torch'}")
        return 0


def _cell(info: _BackendInfo) -> str:
    if info["status"] == "unsupported":
        return "-"
    return f"tp{info['tensor_parallel_size']}" + ("?" if info["status"] == "unverified" else "")


def _preset_table(rows: list[_PresetRow], backends: list[str]) -> str:
    header = ["NAME", "MODEL", "QUANT", *backends]
    table = [header]
    for row in rows:
        table.append(
            [
                row["name"],
                row["model"] or "(pass --model)",
                row["quantization"] or "",
                *(_cell(row["backends"][b]) for b in backends),
            ]
        )
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in table]
    lines.append("")
    lines.append(
        "tpN: tensor-parallel size on that backend; ?: unverified (serve warns); -: unsupported (serve refuses)."
    )
    lines.append("`xcforge-engine presets NAME` shows the arguments; `serve --preset NAME` uses them.")
    return "\n".join(lines)


def _preset_detail(row: _PresetRow) -> str:
    lines = [
        f"{row['name']}: {row['title']}, {row['params_b']:g}B parameters, model {row['model'] or '(pass --model)'}"
    ]
    if row["note"]:
        lines.append(f"note: {row['note']}")
    for backend, info in row["backends"].items():
        status = info["status"]
        reason = f" ({info['reason']})" if info["reason"] else ""
        args = shlex.join(info["args"]) if status != "unsupported" else ""
        lines.append(f"  {backend:<7} {status:<12} {args}{reason}".rstrip())
    return "\n".join(lines)


def _check_install(launcher: Launcher, argv: Sequence[str]) -> int:
    return check_install(launcher.env, list(argv))


COMMANDS: dict[str, Callable[[Launcher, Sequence[str]], int]] = {
    "check-install": _check_install,
    "serve": Launcher.serve,
    "doctor": Launcher.doctor,
    "fetch-model": Launcher.fetch_model,
    "healthcheck": Launcher.healthcheck,
    "presets": Launcher.presets,
    "version": Launcher.version,
}


def _is_program(word: str) -> bool:
    """A program to run rather than a serve argument: not an option, and found on PATH (or a path
    to an executable file). A model directory given as the first serve argument is not executable."""
    if word.startswith("-"):
        return False
    if "/" in word:
        return os.path.isfile(word) and os.access(word, os.X_OK)
    return shutil.which(word) is not None


def main(
    argv: Sequence[str] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    host: Host | None = None,
    software: Software | None = None,
) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    env = os.environ if env is None else env
    debug = truthy(env.get("XCFORGE_DEBUG"))
    while args and args[0] == "--debug":
        debug = True
        args.pop(0)
    if args and args[0] == "help":
        print(USAGE)
        return 0
    if args and args[0] in COMMANDS:
        command, rest = COMMANDS[args[0]], args[1:]
    elif args and _is_program(args[0]):
        # `docker run IMAGE python3 -c ...`: the image's entrypoint has already sourced the vendor's
        # environment scripts, so the program sees what our launcher sees.
        try:
            os.execvp(args[0], args)
        except OSError as exc:
            log.error(f"cannot run {args[0]}: {exc.strerror or exc}")
            return 126
    else:
        command, rest = Launcher.serve, args
    try:
        launcher = Launcher(env, host or Host.real(), software)
        return command(launcher, rest)
    except EngineError as exc:
        for line in exc.lines:
            log.error(line)
        if debug:
            traceback.print_exc()
        return exc.exit_code
    except BrokenPipeError:  # stdout closed early (`| head`): not a failure of ours
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except SystemExit as exc:  # argparse's own --help
        return exc.code if isinstance(exc.code, int) else 0
    except KeyboardInterrupt:
        log.error("interrupted")
        return 130
    except Exception as exc:  # an internal fault: one line, the traceback on request
        log.error(f"unexpected {type(exc).__name__}: {exc} (rerun with --debug or XCFORGE_DEBUG=1 for the traceback)")
        if debug:
            traceback.print_exc()
        return 1
