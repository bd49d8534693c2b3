"""Expected failures, each with a stable exit code (documented in docs/engine.md).

The CLI prints each line of `lines` as `[xcforge] error: ...` and exits with the class's code; a
traceback only with --debug / XCFORGE_DEBUG=1. Codes are an interface (orchestrators and the
image's smoke tests branch on them): never renumber.
"""

from __future__ import annotations

from collections.abc import Sequence


class EngineError(Exception):
    exit_code = 1

    def __init__(self, message: str, *, more: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.lines = [message, *more]


class Unhealthy(EngineError):
    """healthcheck: the server did not answer 200. 1 is what Docker's HEALTHCHECK means by unhealthy."""

    exit_code = 1


class UsageError(EngineError):
    """A bad argument: unknown subcommand option, unknown preset, a preset this backend cannot run."""

    exit_code = 2


class PreflightFailed(EngineError):
    """The container cannot serve as started: a device, driver mount or model is missing."""

    exit_code = 3


class EngineMissing(EngineError):
    """The image holds no usable vLLM (a stand-in build, XCFORGE_ENGINE_INSTALL=skip)."""

    exit_code = 4


class InstallCheckFailed(EngineError):
    """check-install: the engine this image claims does not import, has another version, or its
    plugin or dependencies are broken (fails the image build)."""

    exit_code = 5
