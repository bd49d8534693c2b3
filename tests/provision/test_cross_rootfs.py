"""The derivation's own rules, on small made-up trees (no network, no docker). The derivation as a whole
is checked against the real archive and an emulated bootstrap in test_cross_rootfs_docker.py."""

from __future__ import annotations

import os
import py_compile
from pathlib import Path

from xcforge.provision import cross_rootfs
from xcforge.provision.cross_rootfs import Stanza, installed_stanza, parse_stanzas

STATUS = """\
Package: libc6
Status: install ok installed
Architecture: amd64
Multi-Arch: same
Version: 2.36-9+deb12u14
Description: GNU C Library: Shared libraries{TRAILING}
 Contains the standard libraries.
 .
 More text.

Package: base-passwd
Essential: yes
Status: install ok installed
Architecture: amd64
Version: 3.6.1
Description: Debian base system master password and group files

""".format(TRAILING=" ")  # a first line's trailing space is the package's own and is kept


def test_status_round_trips_byte_for_byte() -> None:
    stanzas = parse_stanzas(STATUS)
    assert [s.get("Package") for s in stanzas] == ["libc6", "base-passwd"]
    assert "".join(s.text() for s in stanzas) == STATUS  # the trailing space after "libraries" included


def test_installed_stanza_is_in_dpkgs_order_with_conffiles() -> None:
    control = parse_stanzas(
        "Package: apt\nVersion: 2.6.2\nArchitecture: arm64\nMaintainer: APT <deity@lists.debian.org>\n"
        "Installed-Size: 4668\nDepends: libc6\nSection: admin\nPriority: important\nHomepage: https://x\n"
        "Description: commandline package manager\n more\n"
    )[0]
    stanza = installed_stanza(control, [("/etc/apt/apt.conf.d/01autoremove", "879455db9b938ce287b23383629aedce")])
    assert [k for k, _ in stanza.fields] == [
        "Package", "Status", "Priority", "Section", "Installed-Size", "Maintainer", "Architecture", "Version",
        "Depends", "Conffiles", "Description", "Homepage",
    ]  # fmt: skip
    assert stanza.get("Status") == "install ok installed"
    assert "Conffiles:\n /etc/apt/apt.conf.d/01autoremove 879455db9b938ce287b23383629aedce\n" in stanza.text()


def test_info_prefix_names_the_architecture_of_multi_arch_same_packages_only() -> None:
    libc, passwd = parse_stanzas(STATUS)
    assert cross_rootfs.info_prefix(libc, "arm64") == "libc6:arm64"
    assert cross_rootfs.info_prefix(passwd, "arm64") == "base-passwd"


def test_arch_specific_leaves_architecture_all_alone() -> None:
    stanzas = [*parse_stanzas(STATUS), Stanza([("Package", "tzdata"), ("Architecture", "all")])]
    assert [s.get("Package") for s in cross_rootfs.arch_specific(stanzas, "arm64")] == ["libc6", "base-passwd"]


def test_removing_a_native_package_keeps_shared_directories_and_merged_usr_links(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "usr/lib/x86_64-linux-gnu/perl/5.36.0").mkdir(parents=True)
    (root / "usr/lib/x86_64-linux-gnu/perl/5.36.0/Config.pm").write_text("x")
    (root / "usr/lib/x86_64-linux-gnu/perl/5.36").symlink_to("5.36.0")
    (root / "usr/bin").mkdir()
    (root / "usr/bin/perl").write_text("elf")
    (root / "usr/bin/other").write_text("kept")
    (root / "lib").symlink_to("usr/lib")
    (root / "run").mkdir()
    (root / "var").mkdir()
    (root / "var/run").symlink_to("/run")  # made by base-files' postinst; the package lists a directory
    info = root / "var/lib/dpkg/info"
    info.mkdir(parents=True)
    listed = ["/.", "/lib", "/usr", "/usr/bin", "/usr/bin/perl", "/var/run", "/usr/lib/x86_64-linux-gnu",
              "/usr/lib/x86_64-linux-gnu/perl", "/usr/lib/x86_64-linux-gnu/perl/5.36",
              "/usr/lib/x86_64-linux-gnu/perl/5.36.0", "/usr/lib/x86_64-linux-gnu/perl/5.36.0/Config.pm"]  # fmt: skip
    (info / "perl-base.list").write_text("\n".join(listed) + "\n")
    (info / "perl-base.md5sums").write_text("")
    (info / "perl-base.11.list").write_text("another package's record")  # not perl-base's: kept
    stanza = Stanza([("Package", "perl-base"), ("Architecture", "amd64")])

    directories = cross_rootfs._remove_native(root, info, stanza, "amd64")
    cross_rootfs._prune(root, directories)

    assert not (root / "usr/bin/perl").exists()
    assert (root / "usr/bin/other").read_text() == "kept"
    assert (root / "lib").is_symlink() and (root / "var/run").is_symlink()
    assert not (root / "usr/lib/x86_64-linux-gnu").exists()  # the dangling 5.36 link went, then the directories
    assert sorted(p.name for p in info.iterdir()) == ["perl-base.11.list"]


def test_bytecode_that_no_longer_matches_its_source_is_found(tmp_path: Path) -> None:
    source = tmp_path / "mod.py"
    source.write_text("x = 1\n")
    pyc = Path(py_compile.compile(str(source)))
    assert cross_rootfs._bytecode_current(pyc, source)
    os.utime(source, (0, 12345))  # the foreign .deb's file: same text, its own build time
    assert not cross_rootfs._bytecode_current(pyc, source)
    source.unlink()
    assert not cross_rootfs._bytecode_current(pyc, source)


def test_apt_and_debconf_records_name_the_new_architecture(tmp_path: Path) -> None:
    states = tmp_path / "extended_states"
    states.write_text("Package: tzdata\nArchitecture: amd64\nAuto-Installed: 1\n\n")
    cross_rootfs._retag_extended_states(states, "amd64", "arm64")
    assert states.read_text() == "Package: tzdata\nArchitecture: arm64\nAuto-Installed: 1\n\n"
    (tmp_path / "config.dat").write_text("Name: libraries/restart\nOwners: libc6, libc6:amd64\nValue: amd64\n")
    cross_rootfs._retag_debconf(tmp_path, "amd64", "arm64")
    expected = "Name: libraries/restart\nOwners: libc6, libc6:arm64\nValue: amd64\n"
    assert (tmp_path / "config.dat").read_text() == expected
