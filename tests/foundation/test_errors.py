"""Exit codes: xcforge/errors.py gives every known error its code, the libraries' errors included,
and the README's table lists every code there is."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import ocicore.errors
import signing.errors
from ocicore.errors import InvalidReference, OciError, RegistryError
from ocicore.registry import RegistryNotFound
from signing.errors import InvalidSigningRequest, SignatureToolError, SigningError, VerificationFailed
from xcforge import errors
from xcforge.cli import main
from xcforge.errors import KNOWN_ERRORS, BuildFailed, ConfigError, XcforgeError, exit_code

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (InvalidReference, 2),
        (RegistryError, 6),
        (RegistryNotFound, 6),
        (InvalidSigningRequest, 2),
        (SigningError, 7),
        (VerificationFailed, 8),
        (ConfigError, 2),
        (BuildFailed, 5),
        (OciError, 1),
        (SignatureToolError, 1),
    ],
)
def test_every_known_error_has_its_code(error, code):
    assert exit_code(error) == exit_code(error("x")) == code
    assert isinstance(error("x"), KNOWN_ERRORS) and error("x").message == "x"


def test_an_instance_may_carry_another_code_and_anything_else_has_none():
    failed = BuildFailed("2 of 3 target(s) failed; first: ...")
    failed.exit_code = 6  # the first failure's own code (pipeline.py)
    assert exit_code(failed) == 6
    with pytest.raises(TypeError):
        exit_code(ValueError("a bug"))


def test_the_libraries_carry_no_exit_codes():
    for module in (ocicore.errors, signing.errors):
        classes = [c for c in vars(module).values() if isinstance(c, type) and c.__module__ == module.__name__]
        assert classes and not [c for c in classes if hasattr(c, "exit_code")], module.__name__


def test_the_readme_lists_every_exit_code():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    table = readme.split("### Exit codes", 1)[1].split("\n## ", 1)[0]
    documented = {int(code) for row in re.findall(r"^\| ([\d /]+) \|", table, re.M) for code in row.split("/")}
    classes = [c for c in vars(errors).values() if isinstance(c, type) and issubclass(c, XcforgeError)]
    codes = {exit_code(c) for c in classes if c is not XcforgeError}
    codes |= {code for _, code in errors.LIBRARY_EXIT_CODES}
    assert codes <= documented, sorted(codes - documented)


DIGEST = "sha256:" + "0" * 64


@pytest.mark.parametrize(
    ("ref", "with_key", "code", "message"),
    [
        (f"Not A Reference@{DIGEST}", True, 2, "error: invalid image reference"),  # ocicore's InvalidReference
        (f"127.0.0.1:9/x@{DIGEST}", False, 2, "error: no trusted keys given"),  # signing's InvalidSigningRequest
        (f"127.0.0.1:9/x@{DIGEST}", True, 7, "error: "),  # signing's SigningError: the key file is empty
    ],
)
def test_the_cli_prints_a_library_error_on_one_line_with_its_code(tmp_path, capsys, ref, with_key, code, message):
    key = tmp_path / "empty.pem"
    key.write_bytes(b"")
    assert main(["verify", ref, *(["--sm2-key", str(key)] if with_key else [])]) == code
    err = capsys.readouterr().err
    assert err.startswith(message) and err.count("\n") == 1 and "Traceback" not in err
