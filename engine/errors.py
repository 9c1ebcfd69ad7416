"""One error type for bad input: it names the field, so the CLI and the app can say what is wrong; and how each
command line (python -m engine, -m engine.bench, -m engine.train) reports it."""
from __future__ import annotations

import argparse
import os
import signal
import sys


class InputError(ValueError):
    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class Parser(argparse.ArgumentParser):
    """argparse's own errors (a missing or malformed flag) in the CLI's form too: one line, exit 2, no usage block."""

    def error(self, message: str):
        print(f"error: {message} (see {self.prog} --help)", file=sys.stderr)
        sys.exit(2)


def run_command(a: argparse.Namespace) -> int:
    """Run a parsed command line's `func` as every command line of the engine ends: bad input one line naming
    the field and exit 2, Ctrl-C "interrupted" and 130, a reader that closed the pipe (`| head`) quietly."""
    try:
        code = a.func(a) or 0
        sys.stdout.flush()  # a closed pipe fails here, not in the interpreter's own flush at exit
        return code
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except (FileNotFoundError, ValueError) as e:  # trace/prompt files and the like
        print(f"error: {str(e).splitlines()[0] if str(e) else type(e).__name__}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C where no command catches it (loading models, decoding): no traceback
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # what the reader did not want is dropped; stdout now points at nothing, so the exit's flush cannot fail
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE   # as a program killed by the closed pipe ends (`set -o pipefail`)
