"""The key flags every signing command shares (`build`, `sign`, `verify`, `promote`, `audit`,
`bundle`, `import`, `model`), declared once: the same names, the same environment fallbacks in the
help; and the trust they express (public keys, identities), read back once (`trust_from_args`).

Private keys are one file each (or PEM text in $XCFORGE_SM2_KEY / $XCFORGE_COSIGN_KEY); public keys
are trusted keys, repeatable. Passwords never come from flags (shell history, `ps`): the
environment or a terminal prompt (xcforge/sign/keys.py).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from xcforge.sign import keys
from xcforge.sign.keys import COSIGN_KEY_ENV, SM2_KEY_ENV
from xcforge.sign.options import DEFAULT_SM2_DIST_ID

if TYPE_CHECKING:
    from xcforge.sign.check import Trust

Scheme = Literal["sm2", "cosign"]


def add_private_keys(
    parser: argparse.ArgumentParser,
    purpose: str,
    *,
    schemes: tuple[Scheme, ...] = ("sm2", "cosign"),
    distid: bool = False,
) -> None:
    """--sm2-key / --cosign-key FILE: the private keys to sign with, `purpose` saying for what."""
    if "sm2" in schemes:
        parser.add_argument(
            "--sm2-key", type=Path, help=f"SM2 private key (PEM/DER PKCS#8, or PEM in ${SM2_KEY_ENV}) {purpose}"
        )
    if "cosign" in schemes:
        parser.add_argument(
            "--cosign-key", type=Path, help=f"cosign private key (or PEM in ${COSIGN_KEY_ENV}) {purpose}"
        )
    if distid:
        add_distid(parser, "to sign with")


def add_public_keys(
    parser: argparse.ArgumentParser,
    whose: str,
    *,
    distid: bool = True,
    schemes: tuple[Scheme, ...] = ("sm2", "cosign"),
    repeatable: bool = True,
) -> None:
    """--sm2-key / --cosign-key FILE (repeatable): the public keys trusted, `whose` saying whose. A
    private key is accepted too, for its public half (xcforge/sign/keys.py)."""
    action = "append" if repeatable else "store"
    more = " (repeatable)" if repeatable else " (or the private key, for its public half)"
    for scheme, label in (("sm2", "SM2"), ("cosign", "cosign")):
        if scheme in schemes:
            default: list[Path] | None = [] if repeatable else None
            parser.add_argument(
                f"--{scheme}-key", type=Path, action=action, default=default, help=f"{whose} {label} public key{more}"
            )
    if distid:
        add_distid(parser, "to verify with")


def add_distid(parser: argparse.ArgumentParser, use: str) -> None:
    parser.add_argument(
        "--sm2-distid", default=DEFAULT_SM2_DIST_ID, help=f"SM2 distinguishing ID {use} (GB/T 32918 default)"
    )


def add_identities(parser: argparse.ArgumentParser) -> None:
    """--allow-identity / --any-identity: which repository names a signed payload may give."""
    parser.add_argument(
        "--allow-identity", action="append", default=[], metavar="REPO", help="also accept payloads naming REPO"
    )
    parser.add_argument("--any-identity", action="store_true", help="ignore docker-reference, like cosign")


def trust_from_args(args: argparse.Namespace, *, keyless: bool = False) -> Trust:
    """The public keys (files or environment) and identity rules of add_public_keys/add_identities
    (and `--require`, `--keyless-identity` where the command has them), loaded now."""
    from xcforge.sign.check import Trust

    require = getattr(args, "require", None)
    return Trust(
        sm2_keys=tuple(keys.public_keys(args.sm2_key, keys.SM2_KEY_ENV, "sm2")),
        cosign_keys=tuple(keys.public_keys(args.cosign_key, keys.COSIGN_KEY_ENV, "cosign")),
        require=tuple(s.strip() for s in require.split(",") if s.strip()) if require else None,
        allowed_identities=tuple(args.allow_identity),
        check_identity=not args.any_identity,
        sm2_dist_id=args.sm2_distid.encode("utf-8"),
        keyless_identity=args.keyless_identity if keyless else None,
        keyless_issuer=args.keyless_issuer if keyless else Trust.keyless_issuer,
    )


__all__ = ["add_distid", "add_identities", "add_private_keys", "add_public_keys", "trust_from_args"]
