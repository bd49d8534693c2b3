"""`keygen`, `sign`, `verify`, `promote`, `audit verify`: the signing package on the command line.

Passwords never come from flags (they would land in shell history and `ps`): the environment
(XCFORGE_SM2_PASSWORD, XCFORGE_COSIGN_PASSWORD) or an interactive prompt. Keys come from files or
from environment variables holding the PEM text (XCFORGE_SM2_KEY, XCFORGE_COSIGN_KEY), which is how
CI secrets arrive.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING

from xcforge.commands._audit import AUDIT_ENV, add_audit, open_audit
from xcforge.commands._keys import add_distid, add_identities, add_private_keys, add_public_keys, trust_from_args
from xcforge.commands._paths import check_directory, unwritable_reason
from xcforge.errors import ConfigError
from xcforge.sign import keys
from xcforge.sign.audit_log import checkpoint

if TYPE_CHECKING:  # each command imports what it uses when it runs
    from ocicore.registry import Reference
    from xcforge.bake.result import BuildResult
    from xcforge.sign.options import SigningKeys
DEFAULT_KEY_DIR = Path(".xcforge/keys")  # ignored by git, so a key is never committed by accident


def register(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser | None = None
) -> None:
    parents = [common] if common is not None else []

    keygen = subparsers.add_parser("keygen", parents=parents, help="create an SM2 and/or cosign key pair")
    keygen.add_argument("--sm2", action="store_true", help="SM2 key pair (sm2.key PKCS#8, sm2.pub)")
    keygen.add_argument("--cosign", action="store_true", help="ECDSA P-256 pair in cosign's format (cosign.key, .pub)")
    keygen.add_argument("--out", type=Path, default=DEFAULT_KEY_DIR, help=f"directory (default {DEFAULT_KEY_DIR})")
    keygen.add_argument("--no-password", action="store_true", help="write unencrypted private keys (tests only)")
    keygen.add_argument("--force", action="store_true", help="overwrite existing key files")
    add_audit(keygen)
    keygen.set_defaults(func=run_keygen)

    sign = subparsers.add_parser(
        "sign", parents=parents, help="sign IMAGE@DIGEST, or a built --target (digests only, never tags)"
    )
    sign.add_argument("image", metavar="IMAGE@DIGEST", nargs="?")
    sign.add_argument(
        "--target",
        help="sign what the last build recorded for this target (dist/report.json): the index, each platform "
        "and its zstd variant's, with the SBOMs and provenance, as `build --sign` does",
    )
    sign.add_argument("--report", type=Path, default=Path("dist"), help="directory holding report.json (--target)")
    add_private_keys(sign, "to sign with", distid=True)
    sign.add_argument("--keyless", action="store_true", help="also sign keyless with Sigstore (CI OIDC token)")
    sign.add_argument("-a", "--annotation", action="append", default=[], metavar="KEY=VALUE", help="payload claim")
    sign.add_argument("--archive", type=Path, help="sign an OCI-layout archive: files in <archive>.signatures/")
    sign.add_argument("--insecure", action="store_true", help="plain http to a non-loopback registry")
    add_audit(sign)
    sign.set_defaults(func=run_sign)

    verify = subparsers.add_parser("verify", parents=parents, help="verify IMAGE@DIGEST (or a built --target)")
    verify.add_argument("image", metavar="IMAGE@DIGEST", nargs="?")
    verify.add_argument("--target", help="verify what the last build pushed for this target (dist/report.json)")
    verify.add_argument("--report", type=Path, default=Path("dist"), help="directory holding report.json")
    add_public_keys(verify, "a trusted", distid=False)
    verify.add_argument(
        "--require", help="schemes that must be validly signed: sm2,cosign,keyless (default: all given)"
    )
    add_identities(verify)
    add_distid(verify, "to verify with")
    verify.add_argument("--keyless-identity", help="verify Sigstore bundles for this certificate identity")
    verify.add_argument(
        "--keyless-issuer", default="https://token.actions.githubusercontent.com", help="OIDC issuer of that identity"
    )
    verify.add_argument("--archive", type=Path, help="verify the signature files beside an OCI-layout archive")
    attest = verify.add_mutually_exclusive_group()
    attest.add_argument(
        "--no-attestations",
        action="store_true",
        help="check image signatures only, not each platform's signed SBOM and provenance",
    )
    attest.add_argument(
        "--require-attestations",
        action="store_true",
        help="fail when a platform has no signed SBOM and provenance (default: only when it has some)",
    )
    verify.add_argument("--insecure", action="store_true", help="plain http to a non-loopback registry")
    add_audit(verify)
    verify.set_defaults(func=run_verify)

    promote = subparsers.add_parser("promote", parents=parents, help="copy SRC@DIGEST and its signatures to DST")
    promote.add_argument("source", metavar="SRC@DIGEST")
    promote.add_argument("target", metavar="DST_REPO[:TAG]")
    add_private_keys(promote, "to re-sign for the destination name with")
    promote.add_argument("--insecure", action="store_true", help="plain http to non-loopback registries")
    add_audit(promote)
    promote.set_defaults(func=run_promote)

    audit = subparsers.add_parser("audit", parents=parents, help="audit log tools")
    audit_sub = audit.add_subparsers(dest="audit_command", metavar="ACTION", parser_class=type(audit))
    audit_verify = audit_sub.add_parser("verify", parents=parents, help="check the audit log's hash chain")
    audit_verify.add_argument("path", nargs="?", type=Path, help="default dist/audit.log.jsonl")
    audit_verify.add_argument("--expect-head", metavar="COUNT:HASH", help="head recorded elsewhere (CI report)")
    add_public_keys(audit_verify, "the checkpoints'", distid=False, schemes=("sm2",), repeatable=False)
    audit_verify.set_defaults(func=run_audit_verify)
    for name, helptext in (
        ("checkpoint", "sign the chain head with the SM2 key (--sm2-key or $XCFORGE_SM2_KEY)"),
        ("rotate", "close the current file as a segment and start a new one chained to it"),
        ("prune", "delete closed segments older than the retention period (at least 180 days)"),
        ("export", "write every segment, the current file and the head into one tar.gz with SHA256SUMS"),
    ):
        action = audit_sub.add_parser(name, parents=parents, help=helptext)
        action.add_argument("path", nargs="?", type=Path, help="default dist/audit.log.jsonl")
        if name == "checkpoint":
            add_private_keys(action, "to sign the chain head with", schemes=("sm2",))
        if name == "prune":
            action.add_argument("--retention-days", type=int, default=180, help="at least 180 (the policy)")
        if name == "export":
            action.add_argument("--out", type=Path, required=True, help="the .tar.gz to write")
        action.set_defaults(func=run_audit_action, audit_action=name)
    audit.set_defaults(func=lambda args: _missing_action(audit))


def _missing_action(parser: argparse.ArgumentParser) -> int:
    raise ConfigError(f"{parser.prog}: choose an action (verify, checkpoint, rotate, prune, export)")


# ------------------------------------------------------------------------------------------ commands


def run_keygen(args: argparse.Namespace) -> int:
    from xcforge.sign.keygen import require_password, write_key_pairs

    if not (args.sm2 or args.cosign):
        raise ConfigError("keygen: choose --sm2 and/or --cosign")
    if args.out.exists() and not args.out.is_dir():
        raise ConfigError(f"keygen --out {args.out}: is a file; give the directory the key files go into")
    check_directory(args.out, "keygen --out")
    reason = unwritable_reason(args.out)
    if reason is not None:
        raise ConfigError(f"keygen --out {args.out}: {reason}; give a directory you can write to (--out DIR)")
    # Every input is checked before the first file is written: no half-made key set.
    audit = open_audit(args)
    wanted = [("sm2", keys.SM2_PASSWORD_ENV, "the new SM2 key")] if args.sm2 else []
    wanted += [("cosign", keys.COSIGN_PASSWORD_ENV, "the new cosign key")] if args.cosign else []
    passwords: dict[str, str | None] = {}
    for scheme, env, what in wanted:
        password = None if args.no_password else keys.ask_password(env, what, confirm=True)
        require_password(password, env, args.no_password)
        passwords[scheme] = password
        for name in (f"{scheme}.key", f"{scheme}.pub"):
            if (args.out / name).exists() and not args.force:
                raise ConfigError(f"{args.out / name} exists; pass --force to replace it")
    made = write_key_pairs(args.out, passwords, force=args.force)
    for pair in made:
        print(f"{pair.scheme:<6} key {pair.key_id[:16]}  private {pair.private} (0600)  public {pair.public}")
        if audit is not None:
            audit.record("keygen", key_id=pair.key_id, details={"scheme": pair.scheme, "public_key": str(pair.public)})
    return 0


def _annotations(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ConfigError(f"annotation {pair!r} is not KEY=VALUE; write it like -a release=2026.12")
        out[key] = value
    return out


def _recorded(args: argparse.Namespace, command: str) -> tuple[list[BuildResult], BuildResult]:
    """(every record of the report, the one of --target) for `sign --target` and `verify --target`."""
    from xcforge.report.results import load_results

    results = load_results(args.report)
    matches = [r for r in results if r.target == args.target]
    if not matches or not matches[-1].digest:
        where = args.report / "report.json"
        raise ConfigError(
            f"{command} --target {args.target}: no built digest in {where}; build it first"
            if command == "sign"
            else f"no built digest for target {args.target!r} in {where}; build it first"
        )
    return results, matches[-1]


def _sign_target(args: argparse.Namespace, signing_keys: SigningKeys) -> int:
    """`sign --target T`: the sign stage's own sign_recorded on the recorded result (gzip and zstd
    digests alike), its signatures written back into the report."""
    from xcforge.errors import XcforgeError
    from xcforge.report.results import print_table, with_outcomes, write_reports
    from xcforge.sign.stage import sign_recorded, signed_digests

    if args.annotation or args.archive:
        raise ConfigError(
            "sign --target signs what the report records; --annotation and --archive go with IMAGE@DIGEST"
        )
    results, record = _recorded(args, "sign")
    if record.error:
        raise ConfigError(
            f"sign --target {args.target}: its last build failed ({record.error.splitlines()[0]}); rebuild it first"
        )
    audit = open_audit(args)
    outcome = sign_recorded(record, signing_keys, audit)
    if outcome.error:
        error = XcforgeError(f"{args.target}: {outcome.error}")
        error.exit_code = outcome.error_code or 7
        raise error
    [updated] = with_outcomes([record], signed=[outcome])
    write_reports([updated if r is record else r for r in results], args.report)
    print_table([updated])
    for entry in outcome.signatures:
        what = entry.get("attestation") or "image"
        print(f"{entry.get('scheme')} {what} {record.image_repo}@{entry.get('digest')}: {entry.get('result')}")
    print(f"{args.target}: {len(signed_digests(record))} digest(s) signed (index, platforms and variants)")
    checkpoint(audit, signing_keys)
    return 0


def _signing_keys(args: argparse.Namespace) -> SigningKeys:
    """The keys `sign` was given (files or environment), loaded and decrypted; refused when there are none."""
    from xcforge.sign.options import resolve_signing_keys

    return resolve_signing_keys(
        args.sm2_key, args.cosign_key, keyless=args.keyless, sm2_dist_id=args.sm2_distid, missing="sign: give"
    )


def run_sign(args: argparse.Namespace) -> int:
    """The sign stage (xcforge.sign.stage.sign_subject) for one digest named on the command line,
    or (--target) for everything the report records of a target."""
    from ocicore.registry import Reference
    from xcforge.sign.stage import SignSubject, sign_subject

    if bool(args.image) == bool(args.target):
        raise ConfigError("sign: give IMAGE@DIGEST or --target NAME (one of them)")
    if args.target:
        return _sign_target(args, _signing_keys(args))
    ref = Reference.parse(args.image)
    if ref.digest is None:
        raise ConfigError(
            f"sign takes a digest, not a tag: {args.image} → use {ref.name}@sha256:... "
            "(a tag can move between the build and the signature)"
        )
    signing_keys = _signing_keys(args)
    annotations = _annotations(args.annotation)  # bad input is refused before any registry is read
    audit = open_audit(args)
    repository = str(ref.with_digest(None).with_tag(None))
    subject = SignSubject(
        repository=ref.name if args.archive else repository,
        digests=[ref.digest],
        archive=args.archive,
        statements=_statements(args, ref, ref.digest) if signing_keys.any_key else {},
        annotations=annotations,
        insecure=args.insecure,
    )
    for record in sign_subject(subject, signing_keys, audit):
        print(record.line())
    checkpoint(audit, signing_keys)
    return 0


def _statements(args: argparse.Namespace, ref: Reference, digest: str) -> dict[str, list[tuple[str, bytes]]]:
    """Each platform's SBOM and provenance statements, read back from the archive or the registry."""
    from ocicore.registry import RegistryClient
    from xcforge.attest.attestations import archive_statements, registry_statements

    if args.archive:
        per_platform = archive_statements(args.archive, ref.name)
    else:
        client = RegistryClient(ref.registry, insecure=args.insecure)
        per_platform = registry_statements(client, ref.repository, ref.name, digest)
    if not per_platform:
        print("note: no SBOM or provenance found for this image; only the image digest was signed")
    for platform_digest, statements in per_platform.items():
        if not statements:
            print(f"note: {platform_digest}: no SBOM or provenance to attest")
    return per_platform


def _target_reference(args: argparse.Namespace) -> tuple[str, Path | None, list[str]]:
    """IMAGE@DIGEST (and archive, for archive output) of a target in the last build report, and
    IMAGE@DIGEST of each variant published next to it (zstd)."""
    _, result = _recorded(args, "verify")
    archive = Path(result.archive) if not result.output.pushes and result.archive else None
    variants = [f"{result.image_repo}@{v.digest}" for v in result.variants if v.digest]
    return f"{result.image_repo}@{result.digest}", archive, variants


def run_verify(args: argparse.Namespace) -> int:
    if bool(args.image) == bool(args.target):
        raise ConfigError("verify: give IMAGE@DIGEST or --target NAME (one of them)")
    image, archive, variants = (args.image, args.archive, []) if args.image else _target_reference(args)
    _verify_one(args, image, archive, attestations=None)
    for variant in variants:
        # A variant (the zstd image) is signed like the gzip one; its SBOM and provenance are the
        # gzip platforms' (its manifests name them), so only its signatures are checked here.
        _verify_one(args, variant, None, attestations=False)
    return 0


def _verify_one(args: argparse.Namespace, image: str, archive: Path | None, *, attestations: bool | str | None) -> None:
    """Verify one IMAGE@DIGEST (or archive); VerificationFailed when it does not pass. `attestations`
    overrides the flags' choice (False: signatures only)."""
    from ocicore.registry import Reference
    from signing.store import open_store
    from xcforge.sign.check import check_signatures

    ref = Reference.parse(image)
    if archive is not None and ref.digest is None:
        raise ConfigError(
            "verify --archive needs IMAGE@DIGEST (the name and digest the archive was signed for); "
            "pass it before --archive"
        )
    if ref.digest is None:
        # A tag can move between this check and the pull: what was verified must be what runs.
        raise ConfigError(
            f"verify {image}: a tag, not a digest; pass {ref.name}@sha256:<digest> "
            f"(`docker buildx imagetools inspect {image}` prints the digest)"
        )
    trust = trust_from_args(args, keyless=archive is None)  # bundles live in the registry only
    if attestations is None:
        attestations = "require" if args.require_attestations else not args.no_attestations
    store = open_store(ref.name, archive) if archive is not None else open_store(ref, insecure=args.insecure)
    check_signatures(store, ref.digest, trust, attestations=attestations, audit=lambda: open_audit(args))


def run_promote(args: argparse.Namespace) -> int:
    from signing.promote import promote

    result = promote(
        args.source,
        args.target,
        sm2_key=keys.load_sm2_signing_key(args.sm2_key) if args.sm2_key else None,
        cosign_key=keys.load_cosign_signing_key(args.cosign_key) if args.cosign_key else None,
        audit=open_audit(args),
        insecure=args.insecure,
    )
    for line in result.lines():
        print(line)
    if not result.signatures:
        print(
            "note: copied signatures still name the source repository; verify the destination with "
            "--allow-identity SOURCE, or promote with --sm2-key/--cosign-key to sign it for its new name"
        )
    return 0


def run_audit_verify(args: argparse.Namespace) -> int:
    from signing.audit import DEFAULT_AUDIT_LOG
    from xcforge.sign.audit_log import check_audit_log, parse_head, require_log

    expected = parse_head(args.expect_head)  # a malformed flag is bad input (2), whatever the log
    path = args.path or Path(os.environ.get(AUDIT_ENV, DEFAULT_AUDIT_LOG))
    require_log(path)
    public = keys.public_keys([args.sm2_key], keys.SM2_KEY_ENV, "sm2")[0] if args.sm2_key else None
    for line in check_audit_log(path, expected, public):
        print(line)
    return 0


def run_audit_action(args: argparse.Namespace) -> int:
    from signing.audit import DEFAULT_AUDIT_LOG, AuditLog

    log = AuditLog(args.path or Path(os.environ.get(AUDIT_ENV, DEFAULT_AUDIT_LOG)))
    if args.audit_action != "checkpoint" and not log.path.exists():
        raise ConfigError(
            f"audit {args.audit_action}: {log.path} does not exist; name the log (`audit {args.audit_action} "
            f"PATH` or ${AUDIT_ENV}, default {DEFAULT_AUDIT_LOG}): keygen, sign and verify create it"
        )
    if args.audit_action == "checkpoint":
        key = keys.load_sm2_signing_key(args.sm2_key)
        if key is None:
            raise ConfigError(
                f"audit checkpoint needs an SM2 private key; pass --sm2-key FILE or set ${keys.SM2_KEY_ENV}"
            )
        entry = log.checkpoint(key)
        print(f"checkpoint at entry {entry['seq']}: head {entry['prev']} signed by SM2 key {key.public_key.short_id}")
    elif args.audit_action == "rotate":
        segment = log.rotate()
        print(f"closed {segment}" if segment else f"{log.path} is empty: nothing to rotate")
    elif args.audit_action == "prune":
        removed = log.prune(retention_days=args.retention_days)
        print(
            f"pruned {len(removed)} segment(s) older than {args.retention_days} days"
            + "".join(f"\n  {p}" for p in removed)
        )
    else:
        print(f"exported to {log.export(args.out)}")
    return 0
