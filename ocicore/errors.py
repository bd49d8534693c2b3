"""Typed errors with stable exit codes.

Every failure a user can cause or meet is one of these: the CLI prints `error: <message>` on one
line (a traceback only with --debug) and exits with the class's code. Codes are part of the
interface (CI scripts branch on them), so never renumber them.
"""

from __future__ import annotations


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
    """A tool the step needs (docker, buildx, openssl, cosign) is missing, too old, or not running."""

    exit_code = 3


class RenderError(XcforgeError):
    """A template failed to render, or committed Dockerfiles drifted from their templates."""

    exit_code = 4


class BuildFailed(XcforgeError):
    """docker buildx failed; nothing was published under the final tags."""

    exit_code = 5


class RegistryError(XcforgeError):
    """The registry refused or failed a request after retries."""

    exit_code = 6


class SigningError(XcforgeError):
    """A key could not be read, or a signature could not be made or stored."""

    exit_code = 7


class VerificationFailed(XcforgeError):
    """A required signature is missing or invalid, or the audit chain is broken."""

    exit_code = 8


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
