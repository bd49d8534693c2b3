"""What signing/ raises. No exit codes here: signing is a library; the application
(xcforge/errors.py) gives these their codes (`xcforge.errors.exit_code`: InvalidSigningRequest 2,
SigningError 7, VerificationFailed 8).

Registry failures on the way are the OCI core's own errors (ocicore.errors.RegistryError,
InvalidReference), raised through unchanged.
"""

from __future__ import annotations


class SignatureToolError(Exception):
    """Base class. `message` is one line that says what is wrong and what to do."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidSigningRequest(SignatureToolError):
    """The request itself is wrong: a malformed digest, no keys given, a bad audit field or action,
    a promote between the same repository, an archive that does not hold the digest named."""


class SigningError(SignatureToolError):
    """A key could not be read, or a signature could not be made or stored."""


class VerificationFailed(SignatureToolError):
    """A required signature is missing or invalid, or the audit chain is broken."""
