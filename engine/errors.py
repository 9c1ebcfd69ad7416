"""One error type for bad input: it names the field, so the CLI and the app can say what is wrong."""
from __future__ import annotations


class InputError(ValueError):
    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message
