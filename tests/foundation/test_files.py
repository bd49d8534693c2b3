"""files.replace: the new file takes the name at once; the old one is deleted by a process of its own."""

from __future__ import annotations

import time
from pathlib import Path

from xcforge import files


def _gone(paths: list[Path], within_s: float = 10.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if not any(p.exists() for p in paths):
            return True
        time.sleep(0.02)
    return False


def test_the_new_file_takes_the_name_and_the_old_one_is_deleted(tmp_path: Path, capsys) -> None:
    archive, partial = tmp_path / "t.oci.tar", tmp_path / "t.oci.tar.partial"
    archive.write_bytes(b"old" * 1000)
    partial.write_bytes(b"new")
    files.replace(partial, archive)
    assert archive.read_bytes() == b"new" and not partial.exists()
    assert _gone(list(tmp_path.glob(".t.oci.tar.replaced-*")))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.oci.tar"]
    assert "+ rm -f -- " in capsys.readouterr().err  # echoed, like every external command


def test_a_first_build_has_nothing_to_delete(tmp_path: Path, capsys) -> None:
    archive, partial = tmp_path / "t.oci.tar", tmp_path / "t.oci.tar.partial"
    partial.write_bytes(b"new")
    files.replace(partial, archive)
    assert archive.read_bytes() == b"new"
    assert "rm" not in capsys.readouterr().err


def test_leftovers_of_a_killed_run_go_with_the_next_replacement(tmp_path: Path) -> None:
    archive, partial = tmp_path / "t.oci.tar", tmp_path / "t.oci.tar.partial"
    leftover = tmp_path / ".t.oci.tar.replaced-999999"  # its run died before its rm ran
    other = tmp_path / ".u.oci.tar.replaced-999999"  # another archive's: not this one's to delete
    leftover.write_bytes(b"x")
    other.write_bytes(b"y")
    partial.write_bytes(b"new")
    files.replace(partial, archive)
    assert _gone([leftover])
    assert other.exists() and archive.read_bytes() == b"new"
