"""The README's quick start on a fresh machine, timed phase by phase (issue 22 item 4).

    .venv/bin/python bench/bench_quickstart.py --reset-machine [--revision REV] [--label NAME]

`--reset-machine` first puts this machine back, as far as it can, to what it was before the project's
provisioning first ran on it: DESTRUCTIVE, for a machine that serves this project alone. It stops the
registry, dockerd and containerd that provisioning started; purges the packages that provisioning's
`apt-get install` commands added (read from /var/log/apt/history.log: only those, not the upgrades they
pulled in); drops the trixie apt entry, its lists and the .debs downloaded since; deletes Docker's and
containerd's state (images, BuildKit cache), /etc/docker, the registry's storage, the stand-in rootfs
cache and provisioning's logs; and unregisters QEMU's binfmt entry. Without it the script refuses to
run on a provisioned machine (a warm machine measures nothing of interest).

Then the quick start's first command, `scripts/quickstart.sh`, runs in a fresh `git clone` of REV
(default HEAD) in a temporary directory, with empty pip and uv caches, and every output line is timed.
The phases come from the lines the scripts print (apt, engine, registry, .venv, each stand-in rootfs,
stand-in images, the bake and its export, the SBOMs); `total` is the wall clock of the command.
Writes `quickstart-<label>.json` in bench/results/ and prints a table.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from _common import REPO, git_revision, log, machine, markdown_table, now_iso, write_results

# What provisioning's apt-get commands look like in apt's history (scripts/provision.sh).
PROVISION_COMMANDS = (re.compile(r"--force-confold .*\bmmdebstrap\b"), re.compile(r"-t trixie docker\.io"))
STATE_DIRS = ("/var/lib/docker", "/var/lib/containerd", "/etc/docker", "/var/lib/xcforge", "/var/cache/xcforge")
TRIXIE_FILES = ("/etc/apt/sources.list.d/xcforge-trixie.sources", "/etc/apt/preferences.d/xcforge-trixie")

# Output lines that end a phase: (phase, pattern); a pattern's group "s" is the seconds the script
# itself reports, else the phase lasts from the previous marker to this line.
MARKERS = [
    ("apt packages", re.compile(r"^apt packages: +installed .* in (?P<s>\d+) s")),
    ("docker engine", re.compile(r"^docker engine: +started .* in (?P<s>\d+) s")),
    (".venv", re.compile(r"^python: +\.venv installed in (?P<s>\d+) s")),
    ("rootfs amd64", re.compile(r"rootfs amd64: (?:built|bootstrapped|derived)\b.* in (?P<s>\d+) s")),
    ("rootfs arm64", re.compile(r"rootfs arm64: (?:built|bootstrapped|derived)\b.* in (?P<s>\d+) s")),
    ("stand-in bases (rootfs + images)", re.compile(r"^stand-in bases: +\d+ stand-ins .*\((?P<s>\d+) s\)")),
    ("provision", re.compile(r"^provision: done in (?P<s>\d+) s")),
    ("bake", re.compile(r"bake finished in (?P<s>[\d.]+) s")),
    ("SBOMs", re.compile(r"SBOMs and provenance written in (?P<s>[\d.]+) s")),
]
EXPORT = re.compile(r"#\d+ exporting layers (?P<s>[\d.]+)s done")


def _run(cmd: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    print("+", " ".join(cmd), flush=True)
    return subprocess.run(cmd, text=True, **kw)  # type: ignore[call-overload, no-any-return]  # kw: subprocess's own


def provisioned_packages(history: Path = Path("/var/log/apt/history.log")) -> list[str]:
    """The packages provisioning's own apt-get installs added (not what they upgraded)."""
    packages: list[str] = []
    for entry in history.read_text().split("\n\n"):
        command = next((line for line in entry.splitlines() if line.startswith("Commandline:")), "")
        if not any(p.search(command) for p in PROVISION_COMMANDS):
            continue
        for line in entry.splitlines():
            if line.startswith("Install:"):
                packages += re.findall(r"(?:^Install: |, )([a-z0-9][a-z0-9.+-]*):", line)
    return sorted(set(packages))


def first_provision_time(history: Path = Path("/var/log/apt/history.log")) -> float | None:
    for entry in history.read_text().split("\n\n"):
        if any(p.search(entry) for p in PROVISION_COMMANDS):
            started = re.search(r"Start-Date: (\S+ +\S+)", entry)
            if started:
                return time.mktime(time.strptime(" ".join(started.group(1).split()), "%Y-%m-%d %H:%M:%S"))
    return None


def reset_machine() -> dict[str, object]:
    """Undo provisioning (see the module docstring); returns what it removed."""
    _run(["bash", str(REPO / "scripts/stop-services.sh")], check=False)
    for name in ("dockerd", "containerd", "docker-registry"):  # anything still running under these names
        _run(["pkill", "-x", name], check=False)
    time.sleep(2)
    packages = provisioned_packages()
    since = first_provision_time()
    if packages:
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        _run(["apt-get", "purge", "-y", "-q", *packages], check=True, env=env, stdout=subprocess.DEVNULL)
    for path in (*STATE_DIRS, "/var/log/xcforge", "/run/xcforge"):
        shutil.rmtree(path, ignore_errors=True)
    for path in TRIXIE_FILES:
        Path(path).unlink(missing_ok=True)
    for lists in Path("/var/lib/apt/lists").glob("*trixie*"):
        lists.unlink()
    downloaded = 0
    if since is not None:
        for deb in Path("/var/cache/apt/archives").glob("*.deb"):
            if deb.stat().st_ctime >= since:
                deb.unlink()
                downloaded += 1
    entry = Path("/proc/sys/fs/binfmt_misc/qemu-aarch64")
    if entry.exists():
        entry.write_text("-1")
    return {"purged_packages": packages, "removed_debs": downloaded, "state_dirs": list(STATE_DIRS)}


def looks_provisioned() -> bool:
    return any(Path(p).exists() for p in ("/usr/bin/dockerd", "/var/lib/docker", "/var/cache/xcforge/standin"))


def run_quickstart(revision: str, workdir: Path) -> tuple[float, list[tuple[float, str]], int]:
    """Clone REV, run its quick start; (wall seconds, [(seconds since start, line)], exit code)."""
    clone = workdir / "xcforge"
    _run(["git", "clone", "--quiet", "--no-hardlinks", str(REPO), str(clone)], check=True)
    _run(["git", "-C", str(clone), "checkout", "--quiet", revision], check=True)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.update(PIP_CACHE_DIR=str(workdir / "pip-cache"), UV_CACHE_DIR=str(workdir / "uv-cache"))  # empty, as fresh
    env.pop("VIRTUAL_ENV", None)
    lines: list[tuple[float, str]] = []
    started = time.monotonic()
    print("+ scripts/quickstart.sh", flush=True)
    command = ["bash", "scripts/quickstart.sh"]
    with subprocess.Popen(
        command, cwd=clone, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append((time.monotonic() - started, line.rstrip("\n")))
            if not line.startswith("[cpu] #") and "Reading database" not in line:
                print(f"{lines[-1][0]:7.1f}  {line}", end="", flush=True)
    return time.monotonic() - started, lines, proc.returncode


def phases(lines: list[tuple[float, str]], total: float) -> dict[str, float]:
    """Each marker's reported seconds (or the time since the previous marker), plus build and total."""
    out: dict[str, float] = {}
    provision_end = None
    for at, line in lines:
        for name, pattern in MARKERS:
            found = pattern.search(line)
            if found and name not in out:
                out[name] = float(found.group("s")) if "s" in found.groupdict() else at
                if name == "provision":
                    provision_end = at
        export = EXPORT.search(line)
        if export:
            out["export layers (compress)"] = max(out.get("export layers (compress)", 0.0), float(export.group("s")))
    if provision_end is not None:
        out["build (after provision)"] = round(total - provision_end, 1)
    out["total"] = round(total, 1)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reset-machine", action="store_true", help="undo provisioning first (DESTRUCTIVE)")
    parser.add_argument("--revision", default="HEAD", help="the revision whose quick start runs (default HEAD)")
    parser.add_argument("--label", default=None, help="results file suffix (default: the revision)")
    parser.add_argument("--log", type=Path, help="also write every output line, with its time, to this file")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        raise SystemExit("bench_quickstart: run as root (it provisions, as the quick start does)")
    revision = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short=12", args.revision], capture_output=True, text=True, check=True
    ).stdout.strip()
    reset: dict[str, object] = {}
    if args.reset_machine:
        log("resetting the machine to before provisioning")
        reset = reset_machine()
    elif looks_provisioned():
        raise SystemExit("bench_quickstart: this machine is provisioned already; pass --reset-machine (DESTRUCTIVE)")
    with tempfile.TemporaryDirectory(prefix="xcforge-quickstart-") as tmp:
        total, lines, rc = run_quickstart(revision, Path(tmp))
    if args.log:
        args.log.write_text("".join(f"{at:8.1f}  {line}\n" for at, line in lines))
    measured = phases(lines, total)
    rows = [[name, f"{seconds:.1f} s"] for name, seconds in measured.items()]
    print(markdown_table(["phase", "seconds"], rows))
    doc = {
        "measured_at": now_iso(),
        "bench_revision": git_revision(),
        "quickstart_revision": revision,
        "exit_code": rc,
        "machine": machine(),
        "reset": reset,
        "phases_s": measured,
        "marker_lines": [
            {"at_s": round(at, 1), "line": line}
            for at, line in lines
            if any(p.search(line) for _, p in MARKERS) or EXPORT.search(line)
        ],
    }
    write_results(f"quickstart-{args.label or revision}", doc)
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
