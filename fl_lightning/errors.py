"""User-facing errors: each names the config field and says how to fix it."""
import os
import sys


class FLUserError(Exception):
    """A mistake in the user's input; the CLI prints it as one line and exits with code 2."""


class ConfigError(FLUserError, ValueError):
    def __init__(self, field: str, message: str):
        self.field = field
        super().__init__(f"{field}: {message}")


def check_unchanged(field: str, now, saved) -> None:
    """At resume: a setting that decides the run must be the checkpoint's (None: not recorded)."""
    if saved is not None and now != saved:
        raise ConfigError(field, f"is {now!r} now but {saved!r} in the checkpoint; resume with {saved!r}, or start "
                          "a new run without ckpt_path")


def check_accuracy(field: str, accuracy) -> None:
    """Accuracies are fractions: 90 % is 0.9."""
    if accuracy is not None and not 0.0 < accuracy <= 1.0:
        hint = f"; write {accuracy / 100:g} for {accuracy:g} %" if 1.0 < accuracy <= 100.0 else ""
        raise ConfigError(field, f"is an accuracy, a fraction in (0, 1], got {accuracy:g}{hint}")


class DivergenceError(FLUserError, FloatingPointError):
    """NaN or inf in the loss or the global model."""


def refuse_in_one_line(error: FLUserError) -> FLUserError:
    """``error``, for a refusal before any work in a user's own script (a plain Trainer given an FLCallback): a
    script that does not catch it prints ``fl-lightning: error: ...`` and exits with code 2, no traceback."""
    previous = sys.excepthook

    def hook(kind, raised, traceback):
        if raised is error:
            print(f"fl-lightning: error: {error}", file=sys.stderr, flush=True)
            sys.stdout.flush()
            os._exit(2)  # nothing was started: the Trainer's setup refused it
        previous(kind, raised, traceback)

    sys.excepthook = hook
    return error
