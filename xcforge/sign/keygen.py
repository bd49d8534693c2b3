"""`keygen`: new SM2 and cosign key pairs as files, all or nothing.

The private key file is created 0600 (O_EXCL unless replacing), never readable by others even for a
moment; a failure part-way removes what was written, so there is never half a key set.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from xcforge.errors import ConfigError


@dataclass(frozen=True)
class KeyPair:
    scheme: str  # "sm2" | "cosign"
    key_id: str
    private: Path
    public: Path


def require_password(password: str | None, env: str, no_password: bool) -> None:
    """Only --no-password writes a key without a password: an empty variable or answer is refused."""
    if no_password:
        return
    if password is None:
        raise ConfigError(f"set {env} or run in a terminal (or pass --no-password for tests)")
    if password == "":
        raise ConfigError(
            f"{env} is empty: that would write an unencrypted private key; set a password, or pass "
            "--no-password if an unencrypted key is what you want"
        )


def write_key_pairs(out: Path, passwords: Mapping[str, str | None], *, force: bool) -> list[KeyPair]:
    """A new pair per scheme in `passwords` (scheme → password; None or empty: unencrypted) in `out`."""
    from signing.cosign_keys import CosignPrivateKey
    from signing.sm2_keys import Sm2PrivateKey

    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(
            f"keygen --out {out}: cannot create it ({exc.strerror or exc}); give a directory you can write to"
        ) from None
    made = []
    written: list[Path] = []
    try:
        if "sm2" in passwords:
            sm2_key = Sm2PrivateKey.generate()
            _write_private(out / "sm2.key", sm2_key.to_pem(passwords["sm2"] or None), force, written)
            _write_public(out / "sm2.pub", sm2_key.public_key.to_pem(), force, written)
            made.append(KeyPair("sm2", sm2_key.key_id, out / "sm2.key", out / "sm2.pub"))
        if "cosign" in passwords:
            cosign_key = CosignPrivateKey.generate()
            _write_private(out / "cosign.key", cosign_key.to_cosign_pem(passwords["cosign"] or ""), force, written)
            _write_public(out / "cosign.pub", cosign_key.public_key.to_pem(), force, written)
            made.append(KeyPair("cosign", cosign_key.key_id, out / "cosign.key", out / "cosign.pub"))
    except OSError as exc:
        for path in written:  # no half-made key set
            with contextlib.suppress(OSError):
                path.unlink()
        raise ConfigError(
            f"keygen --out {out}: cannot write {Path(exc.filename or '').name or 'the key files'} "
            f"({exc.strerror or exc}); give a directory you can write to (--out DIR)"
        ) from None
    return made


def _write_private(path: Path, data: bytes, force: bool, written: list[Path]) -> None:
    flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if force else os.O_EXCL)
    try:
        fd = os.open(path, flags, 0o600)
    except FileExistsError as exc:
        raise ConfigError(f"{path} exists; pass --force to replace it") from exc
    written.append(path)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.chmod(path, 0o600)  # O_CREAT's mode is not applied to a file that already existed


def _write_public(path: Path, data: bytes, force: bool, written: list[Path]) -> None:
    if path.exists() and not force:
        raise ConfigError(f"{path} exists; pass --force to replace it")
    written.append(path)
    path.write_bytes(data)


__all__ = ["KeyPair", "require_password", "write_key_pairs"]
