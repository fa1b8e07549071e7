"""Errors by layer. The CLI maps them to exit codes: BadInput -> 2, RuntimeFailure -> 1."""


class AutoscalerError(Exception):
    """Base of the project's own errors."""

    exit_code = 1


class BadInput(AutoscalerError):
    """The user gave something invalid: a policy, a trace, a snapshot, a flag. Exit code 2.

    The message is one line that names the file, line or field where one exists.
    """

    exit_code = 2


class RuntimeFailure(AutoscalerError):
    """A service was unreachable or failed (Prometheus, the gateway, the database). Exit code 1."""

    exit_code = 1
