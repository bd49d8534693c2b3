"""The stand-in rootfs of the other architecture, without emulating its bootstrap (issue 22 item 4).

mmdebstrap bootstraps a foreign architecture by running that architecture's dpkg, apt and maintainer
scripts under QEMU: two minutes for arm64 on 2 cores, on the quick start's critical path. Here the
foreign rootfs is derived from the native one instead, from the same Debian archive, and the only
foreign program run is `ldconfig`:

1. the native rootfs (mmdebstrap, configured natively) is unpacked;
2. every package that is not `Architecture: all` is swapped for the same version built for the
   foreign architecture (`apt-get download` with a private apt state): its files replace the native
   ones, and what dpkg records of it (status stanza, file list, md5sums, maintainer scripts) comes
   from the foreign .deb, so dpkg and apt in the image see a consistent database;
3. what the maintainer scripts left behind stays: for the stand-in's package set (minbase with
   python3, python3-venv, ca-certificates) it does not depend on the architecture (users and groups,
   alternatives links, the CA bundle, debconf's answers); conffiles keep their configured content;
4. what does depend on it is redone: /var/lib/dpkg/arch, the merged-/usr links of the multilib
   directories (/lib64 exists on amd64 only), bytecode whose source is gone, and the dynamic linker's
   cache (the foreign `ldconfig`, a second under QEMU).

tests/provision/test_cross_rootfs_docker.py compares the result with an emulated bootstrap of the
same archive: the same packages, versions and files once the architecture's names are normalised, and
`dpkg --verify` clean inside the image.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from xcforge.console import echo
from xcforge.errors import EnvironmentProblem
from xcforge.shell import run

# The merged-/usr links mmdebstrap (and usrmerge) make: always the first three, the multilib ones
# for whichever of them /usr holds. Packages list them as directories; they are nobody's to remove.
MULTILIB_DIRS = ("lib32", "lib64", "libx32", "libo32")
MERGED_USR_LINKS = frozenset(("bin", "sbin", "lib", *MULTILIB_DIRS))
_STATUS_INSTALLED = "install ok installed"
# Bump when the derivation changes what it writes (a derived rootfs's cache key includes it).
RECIPE_VERSION = "1"


# ------------------------------------------------------------------------------- dpkg's status file


@dataclass
class Stanza:
    """One paragraph of a deb822 file, fields in their order; a value keeps its continuation lines."""

    fields: list[tuple[str, str]] = field(default_factory=list)

    def get(self, name: str, default: str = "") -> str:
        return next((value for key, value in self.fields if key.lower() == name.lower()), default)

    def text(self) -> str:
        """The paragraph as dpkg writes it, with the blank line that ends it."""
        lines = (f"{key}:{'' if value.startswith(chr(10)) else ' '}{value}\n" for key, value in self.fields)
        return "".join(lines) + "\n"


def parse_stanzas(text: str) -> list[Stanza]:
    stanzas: list[Stanza] = []
    current = Stanza()
    for line in text.splitlines():
        if not line.strip():
            if current.fields:
                stanzas.append(current)
                current = Stanza()
        elif line[0] in " \t" and current.fields:
            key, value = current.fields[-1]
            current.fields[-1] = (key, f"{value}\n{line}")
        else:
            key, _, value = line.partition(":")
            current.fields.append((key, value.lstrip(" \t")))  # a trailing space is the package's own
    if current.fields:
        stanzas.append(current)
    return stanzas


# The order dpkg writes a status paragraph in (lib/dpkg/parse.c); other fields follow in their own order.
STATUS_ORDER = (
    "Package", "Essential", "Protected", "Status", "Priority", "Section", "Installed-Size", "Origin",
    "Maintainer", "Bugs", "Architecture", "Multi-Arch", "Source", "Version", "Config-Version", "Replaces",
    "Provides", "Depends", "Pre-Depends", "Recommends", "Suggests", "Breaks", "Conflicts", "Enhances",
    "Conffiles", "Description", "Triggers-Awaited", "Triggers-Pending",
)  # fmt: skip
_RANK = {name.lower(): i for i, name in enumerate(STATUS_ORDER)}


def installed_stanza(control: Stanza, conffiles: Sequence[tuple[str, str]]) -> Stanza:
    """The status paragraph dpkg writes for an installed package: its control fields, its state and
    its conffiles' md5sums, in dpkg's order."""
    fields = [(k, v) for k, v in control.fields if k.lower() != "status"]
    fields.append(("Status", _STATUS_INSTALLED))
    if conffiles:
        fields.append(("Conffiles", "".join(f"\n {path} {md5}" for path, md5 in conffiles)))
    known = sorted((f for f in fields if f[0].lower() in _RANK), key=lambda f: _RANK[f[0].lower()])
    return Stanza(known + [f for f in fields if f[0].lower() not in _RANK])


def info_prefix(stanza: Stanza, arch: str) -> str:
    """dpkg's file-name prefix in /var/lib/dpkg/info: `name:arch` for Multi-Arch: same packages."""
    name = stanza.get("Package")
    return f"{name}:{arch}" if stanza.get("Multi-Arch") == "same" else name


# ------------------------------------------------------------------------------------ the derivation


def unpack(tarball: Path, root: Path) -> None:
    run(
        [
            "tar",
            "--extract",
            "--same-permissions",
            "--same-owner",
            "--numeric-owner",
            "-f",
            str(tarball),
            "-C",
            str(root),
        ]
    )


def pack(root: Path, tarball: Path) -> None:
    run(["tar", "--create", "--numeric-owner", "--sort=name", "-f", str(tarball), "-C", str(root), "."])


def arch_specific(status: Sequence[Stanza], arch: str) -> list[Stanza]:
    return [s for s in status if s.get("Architecture") not in ("all", arch)]


def download(packages: Iterable[Stanza], arch: str, sources: Path, work: Path) -> dict[str, Path]:
    """Each package's .deb for `arch` at the version installed natively, through a private apt state
    (the machine's own apt configuration, proxies included, is still read)."""
    state, cache, parts, prefs, debs = (work / n for n in ("state", "cache", "sources.list.d", "preferences.d", "debs"))
    for d in (state / "lists" / "partial", cache / "archives" / "partial", parts, prefs, debs):
        d.mkdir(parents=True, exist_ok=True)
    (state / "status").touch()
    one_line = sources.suffix != ".sources"
    if not one_line:
        shutil.copyfile(sources, parts / "debian.sources")
    apt = [
        "apt-get", "-q",
        "-o", f"APT::Architecture={arch}", "-o", f"APT::Architectures={arch}",
        "-o", f"Dir::State={state}", "-o", f"Dir::State::status={state / 'status'}",
        "-o", f"Dir::Cache={cache}",
        "-o", f"Dir::Etc::SourceList={sources if one_line else '/dev/null'}", "-o", f"Dir::Etc::SourceParts={parts}",
        "-o", f"Dir::Etc::PreferencesParts={prefs}", "-o", "Dir::Etc::Preferences=/dev/null",
        # The files are written into this private directory as root; no _apt sandbox user needed.
        "-o", "APT::Sandbox::User=root",
    ]  # fmt: skip
    wanted = {s.get("Package"): s.get("Version") for s in packages}
    for step in (["update"], ["download", *(f"{name}:{arch}={version}" for name, version in wanted.items())]):
        result = run([*apt, *step], check=False, capture=True, cwd=str(debs))
        if result.returncode != 0:
            tail = (result.stderr or result.stdout).decode(errors="replace").strip().splitlines()[-3:]
            raise EnvironmentProblem(
                f"apt-get {step[0]} of the {arch} packages failed ({' / '.join(tail) or 'no output'}); the archive "
                "must serve the same versions for both architectures (a mirror mid-update does not: provision again)"
            )
    found = {deb.name.split("_", 1)[0]: deb for deb in debs.glob("*.deb")}
    missing = sorted(set(wanted) - set(found))
    if missing:
        raise EnvironmentProblem(f"apt-get download gave no {arch} .deb for {', '.join(missing)}")
    return found


def _file(root: Path, path: str) -> Path:
    return root / path.lstrip("/")


def _remove_native(root: Path, info: Path, stanza: Stanza, arch: str) -> list[str]:
    """Delete the package's files and links (not its directories: others may share them) and its dpkg
    records; returns the directories it listed, to prune once every package is swapped."""
    prefix = info_prefix(stanza, arch)
    directories = []
    for path in (info / f"{prefix}.list").read_text().splitlines():
        target = _file(root, path)
        if path in ("", "/."):
            continue
        if target.is_dir():  # also a link to one: /lib -> usr/lib, /var/run -> /run (base-files' postinst)
            directories.append(path)
        elif target.is_symlink() or target.exists():  # a link whose target went first is gone too
            target.unlink()
    for record in info.glob(f"{prefix}.*"):
        if "." not in record.name[len(prefix) + 1 :]:  # python3.list, not python3.11.list
            record.unlink()
    return directories


def _install_foreign(root: Path, info: Path, deb: Path, arch: str, work: Path) -> tuple[Stanza, list[str]]:
    """Unpack the foreign .deb over the tree and write what dpkg keeps of an installed package;
    returns its status paragraph and the paths it lists."""
    control_dir = work / f"control-{deb.stem}"
    run(["dpkg-deb", "--control", str(deb), str(control_dir)], quiet=True)
    control = parse_stanzas((control_dir / "control").read_text())[0]
    names = _extract_data(deb, root)
    # Maintainer scripts never change conffiles (Debian Policy 10.7.3), so they are the shipped ones;
    # some name the architecture (e2fsprogs' cron entry runs /usr/lib/<triplet>/...).
    listed = control_dir / "conffiles"
    shipped = [line.strip() for line in listed.read_text().splitlines() if line.strip()] if listed.exists() else []
    conffiles = [(path, hashlib.md5(_file(root, path).read_bytes()).hexdigest()) for path in shipped]
    prefix = info_prefix(control, arch)
    paths = ["/" + n.removeprefix("./").rstrip("/") for n in names if n not in ("./", ".")]
    (info / f"{prefix}.list").write_text("\n".join(["/.", *paths]) + "\n")
    for member in sorted(control_dir.iterdir()):
        if member.name != "control":
            shutil.copy2(member, info / f"{prefix}.{member.name}")
    return installed_stanza(control, conffiles), paths


def _extract_data(deb: Path, root: Path) -> list[str]:
    """`dpkg-deb --fsys-tarfile | tar -x` keeping the merged-/usr links (/lib → usr/lib) as links;
    returns the member names in archive order (dpkg's .list order)."""
    fsys = ["dpkg-deb", "--fsys-tarfile", str(deb)]
    untar = ["tar", "--extract", "--verbose", "--same-permissions", "--same-owner", "--numeric-owner"]
    # --no-overwrite-dir: a directory's owner and mode as the native postinst left them (apt's
    # lists/partial belongs to _apt), not as the .deb ships them.
    untar += ["--keep-directory-symlink", "--no-overwrite-dir", "-f", "-", "-C", str(root)]
    echo([*fsys, "|", *untar])
    with subprocess.Popen(fsys, stdout=subprocess.PIPE) as producer:
        result = subprocess.run(untar, stdin=producer.stdout, capture_output=True, check=False)
        producer.stdout.close()  # type: ignore[union-attr]  # stdout=PIPE
    if producer.returncode or result.returncode:
        why = result.stderr.decode(errors="replace").strip()[-300:]
        raise EnvironmentProblem(f"unpacking {deb.name} failed: {why}")
    return result.stdout.decode().splitlines()


def _link_multilib(root: Path) -> None:
    """Every multilib link before the foreign packages land (amd64's libc6 ships /lib64/ld-linux…),
    so their files go to /usr; the unused ones are removed afterwards."""
    for name in MULTILIB_DIRS:
        (root / "usr" / name).mkdir(exist_ok=True)
        if not (root / name).is_symlink():
            (root / name).symlink_to(f"usr/{name}")


def _unlink_empty_multilib(root: Path) -> None:
    for name in MULTILIB_DIRS:
        usr = root / "usr" / name
        if usr.is_dir() and not any(usr.iterdir()):
            usr.rmdir()
            (root / name).unlink(missing_ok=True)


def _prune(root: Path, directories: Iterable[str]) -> None:
    """What only native packages listed as directories, deepest first: links that now point nowhere
    (perl's /usr/lib/x86_64-linux-gnu/perl/5.36 -> 5.36.0), then directories left empty."""
    left = sorted(set(directories), key=lambda p: p.count("/"), reverse=True)
    while True:  # a link beside its target dangles only once the target is gone: until nothing changes
        gone = [path for path in left if _prune_one(_file(root, path))]
        if not gone:
            return
        left = [path for path in left if path not in gone]


def _prune_one(target: Path) -> bool:
    if target.is_symlink():
        if target.exists():
            return False
        target.unlink()
    elif target.is_dir() and not any(target.iterdir()):
        target.rmdir()
    else:
        return False
    return True


def _bytecode_current(pyc: Path, source: Path) -> bool:
    """A timestamp-based .pyc is current when its header records the source's mtime and size (PEP 552)."""
    if not source.exists():
        return False
    header = pyc.read_bytes()[:16]
    if len(header) < 16 or int.from_bytes(header[4:8], "little") != 0:
        return len(header) == 16  # hash-based: checked against the source by Python itself
    stat = source.stat()
    mtime, size = int.from_bytes(header[8:12], "little"), int.from_bytes(header[12:16], "little")
    return mtime == int(stat.st_mtime) & 0xFFFFFFFF and size == stat.st_size & 0xFFFFFFFF


def _rebuild_bytecode(root: Path) -> None:
    """The postinsts' bytecode of a swapped module no longer matches its source (the foreign build's
    file has its own mtime) or has none (`_sysconfigdata__x86_64-linux-gnu`): it goes, and the
    foreign interpreter compiles the modules of those directories again, as the postinsts did."""
    recompile: set[Path] = set()
    for cache in [*root.glob("usr/lib/python3*/**/__pycache__"), *root.glob("usr/share/python3/**/__pycache__")]:
        for pyc in cache.glob("*.pyc"):
            source = cache.parent / f"{pyc.name.split('.', 1)[0]}.py"
            if not _bytecode_current(pyc, source):
                pyc.unlink()
                if source.exists():
                    recompile.add(source)
        for source in cache.parent.glob("*.py"):
            if not any(cache.glob(f"{source.stem}.*.pyc")) and any(p.parent == cache.parent for p in recompile):
                recompile.add(source)
    if recompile:
        inside = sorted("/" + str(path.relative_to(root)) for path in recompile)
        run(["chroot", str(root), "python3", "-m", "py_compile", *inside])


def _retag_extended_states(path: Path, native_arch: str, arch: str) -> None:
    """apt's record of automatically installed packages names the native architecture for each one,
    `Architecture: all` packages too."""
    if not path.exists():
        return
    stanzas = parse_stanzas(path.read_text())
    for stanza in stanzas:
        stanza.fields = [(k, arch if (k, v) == ("Architecture", native_arch) else v) for k, v in stanza.fields]
    path.write_text("".join(s.text() for s in stanzas))


def _retag_debconf(cache: Path, native_arch: str, arch: str) -> None:
    """debconf names a Multi-Arch: same owner with its architecture (`Owners: libc6, libc6:amd64`)."""
    for name in ("config.dat", "config.dat-old", "templates.dat", "templates.dat-old"):
        path = cache / name
        if path.exists():
            lines = path.read_text().splitlines(keepends=True)
            retag = (
                line.replace(f":{native_arch}", f":{arch}") if line.startswith("Owners:") else line for line in lines
            )
            path.write_text("".join(retag))


def derive_rootfs(native_tarball: Path, arch: str, sources: Path, out: Path) -> list[str]:
    """Write the `arch` rootfs tarball `out` from the native one; returns the swapped packages."""
    with tempfile.TemporaryDirectory(prefix="xcforge-cross-rootfs-", dir=out.parent) as tmp:
        work = Path(tmp)
        root = work / "root"
        root.mkdir()
        unpack(native_tarball, root)
        dpkg = root / "var/lib/dpkg"
        native_arch = (dpkg / "arch").read_text().split()[0]
        status = parse_stanzas((dpkg / "status").read_text())
        if (dpkg / "statoverride").exists() and (dpkg / "statoverride").read_text().strip():
            # dpkg applies these on unpack; nothing here does, so such a rootfs is bootstrapped emulated.
            raise EnvironmentProblem(f"{native_tarball} has dpkg stat overrides, which a derived rootfs would lose")
        swapped = arch_specific(status, arch)
        debs = download(swapped, arch, sources, work / "apt")
        info = dpkg / "info"
        native_dirs: list[str] = []
        for stanza in swapped:
            native_dirs += _remove_native(root, info, stanza, native_arch)
        _link_multilib(root)
        installed: dict[str, Stanza] = {}
        foreign_paths: set[str] = set()
        for stanza in swapped:
            name = stanza.get("Package")
            installed[name], paths = _install_foreign(root, info, debs[name], arch, work)
            foreign_paths.update(paths)
        _prune(root, set(native_dirs) - foreign_paths)
        _unlink_empty_multilib(root)
        (dpkg / "arch").write_text(f"{arch}\n")
        text = "".join(installed.get(s.get("Package"), s).text() for s in status)
        (dpkg / "status").write_text(text)
        (dpkg / "status-old").write_text(text)
        _retag_extended_states(root / "var/lib/apt/extended_states", native_arch, arch)
        _retag_debconf(root / "var/cache/debconf", native_arch, arch)
        (root / "etc/ld.so.cache").unlink(missing_ok=True)
        run(["chroot", str(root), "/sbin/ldconfig"])
        (root / "var/cache/ldconfig/aux-cache").unlink(missing_ok=True)
        _rebuild_bytecode(root)
        pack(root, out)
    return sorted(installed)


def main(argv: Sequence[str] | None = None) -> int:
    """By hand: python -m xcforge.provision.cross_rootfs NATIVE.tar ARCH OUT.tar [--sources FILE]."""
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("native", type=Path, help="the native rootfs tarball (mmdebstrap)")
    parser.add_argument("arch", help="the architecture to derive (Debian name: arm64, amd64)")
    parser.add_argument("out", type=Path, help="the tarball to write")
    parser.add_argument("--sources", type=Path, default=Path("/etc/apt/sources.list.d/debian.sources"))
    args = parser.parse_args(argv)
    swapped = derive_rootfs(args.native, args.arch, args.sources, args.out)
    print(f"{args.out}: {len(swapped)} packages swapped for {args.arch}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
