"""Loading the models in a background thread, so the UI is up (and shows progress) meanwhile."""
from __future__ import annotations

import os
import threading
import time
import traceback
from pathlib import Path


def shown_name(name: str) -> str:
    """A model's name as the page shows it: a hub id or the embedded model's name as given, a folder on
    the server by its last part only (the page must not tell visitors where the server keeps files)."""
    name = str(name)
    if os.path.isabs(name) or name.startswith(("~", ".")) or Path(name).exists():
        return Path(name.rstrip("/\\")).name or name
    return name


class ModelLoader:
    """Holds the shared, read-only Engine once loaded; no per-run state lives here."""

    def __init__(self, args, enabled: bool = True):
        """`args`: the model flags of engine.options.add_model_args."""
        self.args = args
        self.enabled = enabled
        self.engine = None
        self.error: str | None = None
        self.started = None
        self.loaded_s: float | None = None
        self._thread: threading.Thread | None = None
        self._on_done: list = []

    def on_done(self, fn) -> None:
        """Call fn() once loading has ended (loaded or failed); at once if it has."""
        if self.enabled and self.loading:
            self._on_done.append(fn)
        if not self.loading:  # ended meanwhile (or never started): calling twice is harmless
            fn()

    def start(self) -> "ModelLoader":
        if self.enabled and self._thread is None:
            self.started = time.monotonic()
            self._thread = threading.Thread(target=self._load, name="model-loader", daemon=True)
            self._thread.start()
        return self

    def _load(self) -> None:
        try:
            from engine.decode import Engine
            from engine.options import models_from_args

            self.engine = Engine(models_from_args(self.args))
            self.loaded_s = time.monotonic() - self.started
        except Exception as e:  # InputError (bad --target / --drafter) and anything else
            self.error = str(e).splitlines()[0] if str(e) else type(e).__name__
            traceback.print_exc()
        for fn in self._on_done:
            fn()

    def wait(self, timeout: float | None = None) -> bool:
        if self._thread is not None:
            self._thread.join(timeout)
        return self.ready

    @property
    def ready(self) -> bool:
        return self.engine is not None

    @property
    def loading(self) -> bool:
        return self.enabled and not self.ready and self.error is None

    def status(self) -> str:
        if not self.enabled:
            return "replay only: no model loaded (--no-model); load a trace to explore it"
        if self.error:
            return f"model loading failed: {self.error}"
        if self.ready:
            m = self.engine.models
            return (f"ready: target {shown_name(m.target_name)}, drafter {shown_name(m.drafter_name)}, {m.device}, "
                    f"{str(m.dtype).replace('torch.', '')} (loaded in {self.loaded_s:.1f} s)")
        t = time.monotonic() - self.started if self.started else 0.0
        return (f"loading models… {t:.0f} s (the first start de-quantises the embedded model, ~25 s); "
                "example traces can be explored meanwhile")
