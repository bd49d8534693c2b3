"""The sign stage's options, resolved before anything is built: the keys loaded and decrypted, their
passwords checked, the keyless settings consistent.

`build --push --sign` used to check only that the key files existed and load them after the build
had pushed and tagged, so a wrong password left images tagged but unsigned and no report. The
command line now calls `resolve_signing_keys` first; a key that cannot be used stops the run before
the first bake (ConfigError, exit 2, when no key is given; SigningError, exit 7, when a key cannot
be read, decrypted or parsed, as for `sign`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from xcforge.errors import ConfigError
from xcforge.sign import keys

if TYPE_CHECKING:  # the key modules load when a key does
    from signing.cosign_keys import CosignPrivateKey
    from signing.sm2_keys import Sm2PrivateKey

DEFAULT_SM2_DIST_ID = "1234567812345678"  # GB/T 32918's default user ID


@dataclass(frozen=True)
class SigningKeys:
    sm2: Sm2PrivateKey | None = None
    cosign: CosignPrivateKey | None = None
    sm2_dist_id: bytes = DEFAULT_SM2_DIST_ID.encode()
    keyless: bool = False

    @property
    def any_key(self) -> bool:
        return self.sm2 is not None or self.cosign is not None


@dataclass(frozen=True)
class SignOptions:
    """What the sign stage of `build --sign` needs: the loaded keys and where the audit log lives."""

    keys: SigningKeys
    dist_dir: Path


def check_keyless(flag: str = "--keyless") -> None:
    """In GitHub Actions an OIDC token is there only with `permissions: id-token: write`: its absence
    is known now, not after the build. (Elsewhere the ambient token is looked for when signing.)"""
    if os.environ.get("GITHUB_ACTIONS") == "true" and not os.environ.get("ACTIONS_ID_TOKEN_REQUEST_URL"):
        raise ConfigError(
            f"{flag}: this GitHub Actions job has no OIDC token (ACTIONS_ID_TOKEN_REQUEST_URL is unset); "
            "give the job `permissions: id-token: write`, or drop --keyless and sign with keys"
        )


def resolve_signing_keys(
    sm2_key: Path | None,
    cosign_key: Path | None,
    *,
    keyless: bool = False,
    sm2_dist_id: str = DEFAULT_SM2_DIST_ID,
    missing: str,
) -> SigningKeys:
    """The private keys from the files or $XCFORGE_SM2_KEY / $XCFORGE_COSIGN_KEY, decrypted now.
    `missing` is the sentence that starts the error when there is neither a key nor --keyless."""
    if keyless:
        check_keyless()
    resolved = SigningKeys(
        sm2=keys.load_sm2_signing_key(sm2_key),
        cosign=keys.load_cosign_signing_key(cosign_key),
        sm2_dist_id=sm2_dist_id.encode("utf-8"),
        keyless=keyless,
    )
    if not resolved.any_key and not keyless:
        raise ConfigError(
            f"{missing} --sm2-key and/or --cosign-key (or ${keys.SM2_KEY_ENV} / ${keys.COSIGN_KEY_ENV}), or "
            "--keyless; create keys with `python build.py keygen --sm2 --cosign`"
        )
    return resolved


__all__ = ["DEFAULT_SM2_DIST_ID", "SignOptions", "SigningKeys", "check_keyless", "resolve_signing_keys"]
