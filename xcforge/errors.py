"""xcforge's typed errors with stable exit codes, and the one place that gives every error its code.

Every failure a user can cause or meet is one of these, or one of the libraries' own errors
(ocicore.errors: a malformed reference, a registry that failed; signing.errors: a wrong signing
request, a key or signature that failed, a verification that failed). The CLI prints
`error: <message>` on one line (a traceback only with --debug) and exits with `exit_code(error)`.
Codes are part of the interface (CI scripts branch on them, README lists them), so never renumber them.

A stage boundary that turns an error into an outcome catches `KNOWN_ERRORS` (the three bases):
anything else is a bug and goes on up.
"""

from __future__ import annotations

from ocicore.errors import InvalidReference, OciError, RegistryError
from signing.errors import InvalidSigningRequest, SignatureToolError, SigningError, VerificationFailed


class XcforgeError(Exception):
    """Base class. `message` is one line that says what is wrong and what to do."""

    exit_code = 1

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ConfigError(XcforgeError):
    """matrix.yaml, a site config or a CLI argument is invalid."""

    exit_code = 2


class EnvironmentProblem(XcforgeError):
    """A tool or service the step needs (docker, buildx, uv, mmdebstrap, a package index) is missing, too old,
    or not running. (openssl and cosign are never run by xcforge: they are the independent checks
    docs/signing.md shows.)"""

    exit_code = 3


class RenderError(XcforgeError):
    """A template failed to render, or committed Dockerfiles drifted from their templates."""

    exit_code = 4


class BuildFailed(XcforgeError):
    """docker buildx failed; nothing was published under the final tags."""

    exit_code = 5


class SmokeFailed(XcforgeError):
    """One or more smoke checks failed against a built image."""

    exit_code = 9


class DependencyConflict(XcforgeError):
    """A target's requirements do not resolve although every index they need was reachable."""

    exit_code = 10


class BundleDamaged(XcforgeError):
    """A transfer bundle is incomplete or its bytes differ from its signed manifest (a chunk missing
    or corrupt, a blob swapped, a file added); nothing was published."""

    exit_code = 11


class Interrupted(XcforgeError):
    """The user pressed Ctrl-C; partial work was cleaned up."""

    exit_code = 130


# The libraries' errors and their codes (first match wins: a subclass before its base). 6, 7 and 8
# are the codes these failures always had; a malformed reference or signing request is bad input (2).
LIBRARY_EXIT_CODES: tuple[tuple[type[Exception], int], ...] = (
    (InvalidReference, ConfigError.exit_code),
    (RegistryError, 6),
    (InvalidSigningRequest, ConfigError.exit_code),
    (SigningError, 7),
    (VerificationFailed, 8),
)

# Every error that is a user's or the world's, not a bug: one line `.message` and an exit code.
KNOWN_ERRORS: tuple[type[XcforgeError], type[OciError], type[SignatureToolError]] = (
    XcforgeError,
    OciError,
    SignatureToolError,
)
KnownError = XcforgeError | OciError | SignatureToolError


def exit_code(error: BaseException | type[BaseException]) -> int:
    """The exit code of a known error (an instance, or its class): an XcforgeError's own (an instance
    may carry another code: a failure that stands for a stage's first error), a library error's from
    LIBRARY_EXIT_CODES; 1 for another OciError/SignatureToolError. TypeError for anything else: that
    is a bug, not a failure with a code."""
    kind = error if isinstance(error, type) else type(error)
    if issubclass(kind, XcforgeError):
        return (error if isinstance(error, XcforgeError) else kind).exit_code
    for library_error, code in LIBRARY_EXIT_CODES:
        if issubclass(kind, library_error):
            return code
    if issubclass(kind, KNOWN_ERRORS):
        return XcforgeError.exit_code
    raise TypeError(f"{kind.__name__} is not an error with an exit code")


__all__ = [
    "KNOWN_ERRORS",
    "LIBRARY_EXIT_CODES",
    "BuildFailed",
    "BundleDamaged",
    "ConfigError",
    "DependencyConflict",
    "EnvironmentProblem",
    "Interrupted",
    "KnownError",
    "RenderError",
    "SmokeFailed",
    "XcforgeError",
    "exit_code",
]
