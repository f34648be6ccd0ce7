"""User-facing errors: each names the config field and says how to fix it."""


class FLUserError(Exception):
    """A mistake in the user's input; the CLI prints it as one line and exits with code 2."""


class ConfigError(FLUserError, ValueError):
    def __init__(self, field: str, message: str):
        self.field = field
        super().__init__(f"{field}: {message}")


class DivergenceError(FLUserError, FloatingPointError):
    """NaN or inf in the loss or the global model."""
