"""The one exception type the CLI turns into a one-line message and exit code 2."""


class MlacheckError(Exception):
    """Bad input or environment: the message is one line naming what is wrong and what to do."""

    exit_code = 2
