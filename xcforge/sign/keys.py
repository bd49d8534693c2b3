"""Signing keys from files or the environment, for every stage that signs or verifies (not only the
CLI): PEM text in XCFORGE_SM2_KEY / XCFORGE_COSIGN_KEY, passwords in XCFORGE_*_PASSWORD or asked on
a terminal. Key material stays in memory; nothing here logs or writes it.
"""

from __future__ import annotations

import getpass
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Literal, overload

from signing.errors import SigningError
from xcforge.errors import ConfigError

if TYPE_CHECKING:  # the key modules load when a key does
    from signing.cosign_keys import CosignPrivateKey, CosignPublicKey
    from signing.sm2_keys import Sm2PrivateKey, Sm2PublicKey

SM2_KEY_ENV, COSIGN_KEY_ENV = "XCFORGE_SM2_KEY", "XCFORGE_COSIGN_KEY"
SM2_PASSWORD_ENV, COSIGN_PASSWORD_ENV = "XCFORGE_SM2_PASSWORD", "XCFORGE_COSIGN_PASSWORD"


def ask_password(env: str, what: str, *, confirm: bool = False) -> str | None:
    value = os.environ.get(env)
    if value is not None:
        return value
    if not sys.stdin.isatty():
        return None
    first = getpass.getpass(f"password for {what}: ")
    if confirm and getpass.getpass(f"again, password for {what}: ") != first:
        raise ConfigError("the passwords did not match; run it again and type the same password twice")
    return first


def _key_bytes(path: Path | None, env: str, what: str) -> tuple[bytes, str] | None:
    if path is not None:
        flag = "--sm2-key" if env == SM2_KEY_ENV else "--cosign-key"
        if not path.exists():
            raise ConfigError(
                f"{flag} {path}: no such file; give the {what} file, or create one with `python build.py keygen`"
            )
        if not path.is_file():
            raise ConfigError(f"{flag} {path}: not a file; give the {what} file")
        try:
            return path.read_bytes(), str(path)
        except OSError as exc:
            raise ConfigError(
                f"{flag} {path}: cannot read it ({exc.strerror}); make it readable by this user"
            ) from None
    pem = os.environ.get(env)
    if pem:
        not_a_path(pem, env, what)
        pem_text(pem, env, what)
        return pem.encode(), f"${env}"
    return None


def pem_text(value: str, env: str, what: str) -> None:
    """The variable holds PEM text, or it is refused here with what to put in it instead."""
    if "-----BEGIN" in value:
        return
    flag = "--sm2-key" if "SM2" in env else "--cosign-key"
    raise SigningError(
        f"${env} holds no PEM key (no -----BEGIN line); put the {what}'s PEM text in it "
        f'({env}="$(cat KEYFILE)"), or unset it and pass {flag} FILE'
    )


def not_a_path(value: str, env: str, what: str) -> None:
    if (
        "-----BEGIN" not in value
        and "\n" not in value.strip()
        and (Path(value).exists() or value.startswith(("/", ".")))
    ):
        flag = "--sm2-key" if "SM2" in env else "--cosign-key"
        raise SigningError(
            f"${env} holds a path ({value[:80]}), not the {what}'s PEM text; pass the file with {flag} FILE "
            f"or put the PEM itself in ${env}"
        )


def is_encrypted(data: bytes) -> bool:
    return b"ENCRYPTED" in data[:200] or b"Proc-Type: 4,ENCRYPTED" in data


def load_sm2_signing_key(path: Path | None) -> Sm2PrivateKey | None:
    found = _key_bytes(path, SM2_KEY_ENV, "SM2 key")
    return None if found is None else _sm2_private(*found)


def _sm2_private(data: bytes, source: str) -> Sm2PrivateKey:
    from signing.sm2_keys import load_sm2_private_key

    password = None
    if is_encrypted(data):
        password = ask_password(SM2_PASSWORD_ENV, f"SM2 key {source}")
        if password is None:
            raise SigningError(f"{source} is encrypted: set {SM2_PASSWORD_ENV} (no terminal to ask on)")
    return load_sm2_private_key(data, password, source=source)


def load_cosign_signing_key(path: Path | None) -> CosignPrivateKey | None:
    found = _key_bytes(path, COSIGN_KEY_ENV, "cosign key")
    return None if found is None else _cosign_private(*found)


def _cosign_private(data: bytes, source: str) -> CosignPrivateKey:
    from signing.cosign_keys import SIGSTORE_LABELS, load_cosign_private_key

    password = None
    sealed = any(label.encode() in data for label in SIGSTORE_LABELS)
    if is_encrypted(data):
        password = ask_password(COSIGN_PASSWORD_ENV, f"cosign key {source}")
        # cosign lets a key be sealed with an empty password (keygen --no-password); try that before
        # giving up, also when the password variable holds something else (it belongs to another key).
        if password is None and sealed:
            password = ""
        if password is None:
            raise SigningError(f"{source} is encrypted: set {COSIGN_PASSWORD_ENV} (no terminal to ask on)")
    try:
        return load_cosign_private_key(data, password, source=source)
    except SigningError:
        if not (sealed and password):
            raise
        return load_cosign_private_key(data, "", source=source)


@overload
def public_keys(paths: list[Path], env: str, scheme: Literal["sm2"]) -> list[Sm2PublicKey]: ...
@overload
def public_keys(paths: list[Path], env: str, scheme: Literal["cosign"]) -> list[CosignPublicKey]: ...


def public_keys(
    paths: list[Path], env: str, scheme: Literal["sm2", "cosign"]
) -> list[Sm2PublicKey] | list[CosignPublicKey]:
    from signing.cosign_keys import load_cosign_public_key
    from signing.sm2_keys import load_sm2_public_key

    flag = "--sm2-key" if scheme == "sm2" else "--cosign-key"
    blobs = []
    for path in paths:
        try:
            blobs.append((path.read_bytes(), str(path)))
        except OSError as exc:
            raise ConfigError(f"{flag} {path}: {exc.strerror or exc}; give a {scheme} public key file (PEM)") from None
    if not blobs and os.environ.get(env):
        what = "SM2 key" if scheme == "sm2" else "cosign key"
        not_a_path(os.environ[env], env, what)
        pem_text(os.environ[env], env, what)
        blobs = [(os.environ[env].encode(), f"${env}")]
    # A private key given (file or variable): trust its own public half.
    if scheme == "sm2":
        return [
            _sm2_private(data, source).public_key
            if b"PRIVATE KEY" in data
            else load_sm2_public_key(data, source=source)
            for data, source in blobs
        ]
    return [
        _cosign_private(data, source).public_key
        if b"PRIVATE KEY" in data
        else load_cosign_public_key(data, source=source)
        for data, source in blobs
    ]
