"""What the OCI core raises: a reference it cannot accept, or a registry that refused or failed.

No exit codes here: the OCI core is a library. The application (xcforge/errors.py) gives these
their codes (`xcforge.errors.exit_code`: InvalidReference 2, RegistryError 6).
"""

from __future__ import annotations


class OciError(Exception):
    """Base class. `message` is one line that says what is wrong and what to do."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidReference(OciError):
    """An image reference, tag, digest, registry host or repository name is malformed."""


class RegistryError(OciError):
    """The registry refused or failed a request after retries, or answered with something wrong."""
