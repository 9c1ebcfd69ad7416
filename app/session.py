"""Per-session state (kept in gr.State, never at module level), the bounds on what sessions hold
(Sessions), and trace bookkeeping for the UI."""
from __future__ import annotations

import ctypes
import logging
import os
import secrets
import shutil
import tempfile
import threading
import time
import weakref
from collections import OrderedDict
from functools import lru_cache
from pathlib import Path

from engine.options import MAX_UPLOAD_BYTES, MODES, RULES
from engine.paths import TRACES as TRACES_DIR
from engine.trace import load_trace, run_stats, save_trace

log = logging.getLogger("reanchor.app")

# What sessions may hold, for this machine (2 cores, 24 GiB): each a trace of up to MAX_UPLOAD_BYTES, which takes
# engine.options.UPLOAD_PARSED_MB once parsed.
MAX_SESSIONS = 16         # sessions holding a trace of their own; the least recently used gives its up
SESSION_IDLE_S = 30 * 60  # a session's traces are freed after this long unused (closing the tab: at once)
SESSION_LIFETIME_S = 6 * 3600  # Gradio drops a session's state this long after its last load or run
EXPORT_PREFIX = "reanchor-app-"
APP_MAX_NEW_TOKENS = 2048
# Runs take turns (one queue slot): each stops after this long so that no user holds the queue for minutes
# (python -m app --run-seconds; the page shows it under Max new tokens).
RUN_SECONDS = 60.0
MAX_PROMPT_CHARS = 20000
FIELD_LABELS = {"prompt": "Prompt", "mode": "Mode", "rule": "Attachment rule", "temperature": "Temperature",
                "seed": "Seed", "max_new_tokens": "Max new tokens", "max_shifted": "Shifted blocks", "max_trie_nodes": "Trie nodes",
                "trace": "Load trace", "schema": "Load trace", "target": "Target", "drafter": "Drafter", "device": "Device"}


class State(dict):
    """One browser session's state; a dict that Sessions can refer to weakly (never keeping it alive)."""


def new_state() -> State:
    """One browser session: the trace shown, the comparison, the running run's stop handle, view flags.
    `example`: the trace shown is a shipped example (shared by every session, so not this session's)."""
    return State(trace=None, compare=None, run=None, follow=True, view=0, playing=False, trace_file=None,
                 example=False, freed=None)


def owns_traces(st: dict) -> bool:
    """Whether the session holds a trace of its own (a loaded one, a run's, a comparison)."""
    return (st.get("trace") is not None and not st.get("example")) or st.get("compare") is not None


def free_traces(st: dict, why: str) -> None:
    """Drop the session's traces (and its exported file): the page says why when next used."""
    drop_export(st.get("trace_file"))
    st.update(trace=None, compare=None, keyed=None, trace_file=None, example=False, view=0, freed=why,
              starts=None, starts_of=None, text_window=None)  # app.views' per-trace bookkeeping


def export_folder() -> Path:
    """A fresh folder for one export file, in Gradio's upload folder: the download button serves a file there as it
    is, where a file elsewhere was copied into it (two copies, both kept until the server stopped)."""
    os.makedirs(upload_folder(), exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=EXPORT_PREFIX, dir=upload_folder()))


def drop_export(path: str | None) -> None:
    """Delete an export file's folder (export_folder's; any other path, e.g. a shipped example trace, stays)."""
    if path and Path(path).parent.name.startswith(EXPORT_PREFIX) \
            and os.path.dirname(os.path.realpath(Path(path).parent)) == upload_folder():
        shutil.rmtree(Path(path).parent, ignore_errors=True)


def replace_export(st: dict, key: str, path: str | None) -> str | None:
    """st[key] becomes `path`; the export it replaces is deleted (a session keeps one file per key)."""
    old = st.get(key)
    st[key] = path
    if old != path:
        drop_export(old)
    return path


def give_back_memory() -> None:
    """Hand freed heap back to the system: glibc keeps it otherwise (a freed 20 MB trace left ~40 MB)."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


def limit_malloc_arenas(n: int = 2) -> None:
    """At most n glibc arenas (M_ARENA_MAX): every thread that allocates gets its own otherwise (up to 8 a
    core), and what a run or a session freed stayed in its thread's arena, unreturned (docs/security.md)."""
    try:
        ctypes.CDLL("libc.so.6").mallopt(-8, n)
    except (OSError, AttributeError):  # not glibc
        pass


class Sessions:
    """Bounds what the server holds for its sessions: at most `max_sessions` hold traces of their own (the
    least recently used frees its first), none after `idle_s` unused, and a session's are freed as soon as
    its tab closes (`release`, Gradio's unload). Every callback `touch`es its session's state."""

    def __init__(self, max_sessions: int = MAX_SESSIONS, idle_s: float = SESSION_IDLE_S):
        self.max_sessions, self.idle_s = max_sessions, idle_s
        self._used: OrderedDict[int, tuple[weakref.ref, float]] = OrderedDict()  # least recent first
        self._uploads: dict[str, set[int]] = {}  # an upload's path -> the sessions that loaded it
        # a session's rounds token -> its state (app.views.rounds_json: the page fetches rounds ahead of a jump)
        self._tokens: weakref.WeakValueDictionary[str, State] = weakref.WeakValueDictionary()
        self._lock = threading.Lock()
        # Gradio's set of the files its upload route wrote (Blocks.upload_file_set; python -m app sets it): only
        # those are ever claimed. None: nothing is (a file named in a load request may be anyone's)
        self.uploaded: set[str] | None = None

    def touch(self, st: State) -> None:
        now = time.monotonic()
        key = id(st)
        with self._lock:
            if isinstance(st, State) and not st.get("rounds_token"):  # unguessable: only this session's page has it
                st["rounds_token"] = secrets.token_urlsafe(32)
                self._tokens[st["rounds_token"]] = st
            self._used.pop(key, None)
            self._used[key] = (weakref.ref(st), now)
            over = self._over_bounds(now)
        for other, why in over:
            self._free(other, why)

    def _over_bounds(self, now: float) -> list[tuple[State, str]]:
        """Sessions to free: those idle too long, then the least recently used beyond the count."""
        for key in [k for k, (ref, _) in self._used.items() if ref() is None]:  # gone: Gradio dropped them
            del self._used[key]
        live = [(ref(), t) for ref, t in self._used.values()]
        holding = [(s, t) for s, t in live if s is not None and owns_traces(s) and s.get("run") is None]
        idle = [(s, f"unused for {self.idle_s / 60:.0f} min") for s, t in holding if now - t > self.idle_s]
        kept = [s for s, t in holding if now - t <= self.idle_s]
        extra = len(kept) - self.max_sessions
        return idle + [(s, f"{self.max_sessions} sessions held traces") for s in kept[:max(0, extra)]]

    def sweep(self) -> None:
        with self._lock:
            over = self._over_bounds(time.monotonic())
        for st, why in over:
            self._free(st, why)

    def release(self, st) -> None:
        """The session ended (tab closed, or Gradio's state expired): stop its run, free its traces, delete the
        files it uploaded."""
        if isinstance(st, dict):
            with self._lock:
                self._tokens.pop(st.pop("rounds_token", None) or "", None)
            if st.get("run") is not None:
                st["run"].stop()
            self._free(st, "the session ended")
            self._drop_uploads(st)
            replace_export(st, "race_export", None)

    def by_token(self, token: str) -> State | None:
        """The live session whose rounds token this is (None: none; tokens of ended sessions are dropped)."""
        with self._lock:
            return self._tokens.get(token)

    def claim_upload(self, st: State, path: str) -> None:
        """The session loads this upload (Gradio's, which needs no session): it is deleted when the last session
        that loaded it ends. Identical uploads share one path (Gradio names them by content), so a file another
        live session loaded stays; one uploaded again since (a new file renamed over it) is left to its loader.
        Only what Gradio's upload route wrote is ever claimed (`uploaded`): a load request may name any file of the
        upload folder (another session's export, a file of Gradio's cache), and its session's end deleted it."""
        uploaded = self.uploaded
        if uploaded is None or (path not in uploaded and os.path.realpath(path) not in uploaded):
            return
        try:
            real = os.path.realpath(path)
            if os.path.commonpath([real, upload_folder()]) != upload_folder() \
                    or Path(real).parent.name.startswith(EXPORT_PREFIX):
                return
            ino = os.stat(real).st_ino
        except (OSError, ValueError):
            return
        with self._lock:
            st["uploads"] = {**(st.get("uploads") or {}), real: ino}
            self._uploads.setdefault(real, set()).add(id(st))

    def _drop_uploads(self, st: dict) -> None:
        for path, ino in (st.pop("uploads", None) or {}).items():
            with self._lock:
                owners = self._uploads.get(path, set())
                owners.discard(id(st))
                if owners:
                    continue
                self._uploads.pop(path, None)
            try:
                if os.stat(path).st_ino != ino:
                    continue
            except OSError:
                continue
            if remove_upload(Path(path)):
                log.info("upload deleted: its session ended")

    def _free(self, st: dict, why: str) -> None:
        if owns_traces(st):
            free_traces(st, why)
            give_back_memory()
            log.info("session traces freed: %s", why)

    def start_sweeper(self, every_s: float = 60.0) -> "Sessions":
        """Frees idle sessions' traces while no one uses the page (touch does it otherwise)."""
        def loop():
            while True:
                time.sleep(every_s)
                self.sweep()

        threading.Thread(target=loop, name="session-sweeper", daemon=True).start()
        return self


def field_label(field: str) -> str:
    f = str(field)
    if f in FIELD_LABELS:
        return FIELD_LABELS[f]
    if f.startswith(("rounds", "stats", "config", "token_texts", "prompt_ids", "output_ids", "text")):
        return "Load trace"
    return f


def example_traces() -> list[tuple[str, str]]:
    if not TRACES_DIR.is_dir():
        return []
    return [(p.stem, str(p)) for p in sorted(TRACES_DIR.glob("*.json"))]


def load_trace_file(path: str) -> dict:
    """Size-limited, JSON-only, validated by engine.trace.load_trace; raises ValueError naming the field."""
    if not path or not os.path.isfile(path):
        raise ValueError("Load trace: no file")
    try:
        return load_trace(path, max_bytes=MAX_UPLOAD_BYTES)
    except ValueError as e:
        raise ValueError(f"Load trace: {e}") from None
    except OSError as e:
        raise ValueError(f"Load trace: cannot read the file ({e.strerror})") from None


@lru_cache(maxsize=8)
def load_example(path: str) -> dict:
    """A shipped example trace, loaded once and shared read-only by every session."""
    return load_trace_file(path)


UPLOAD_MAX_AGE_S = 600  # uploads are read at once; Gradio keeps them (session or not) until the server stops


def upload_folder() -> str:
    """Where Gradio keeps uploads (and its cache): GRADIO_TEMP_DIR, else TMPDIR/gradio."""
    from gradio.utils import get_upload_folder

    return os.path.realpath(get_upload_folder())


def remove_upload(p: Path) -> bool:
    """Delete an uploaded file and its folder once empty (Gradio's per-upload folder). False: it was gone."""
    try:
        p.unlink()
    except FileNotFoundError:
        return False
    try:
        p.parent.rmdir()
    except OSError:
        pass
    return True


def sweep_uploads(uploads: set, max_age_s: float = UPLOAD_MAX_AGE_S) -> int:
    """Delete Gradio's uploaded files (its Blocks.upload_file_set) older than max_age_s, and their emptied
    folders: 10 x 2 MB uploads needing no session stayed until the server stopped. Returns how many went.
    Those a session loaded go when it ends (Sessions.claim_upload); this sweep takes the rest."""
    now, gone = time.time(), 0
    for path in list(uploads):
        p = Path(path)
        try:
            if now - p.stat().st_mtime < max_age_s:
                continue
            gone += remove_upload(p)
        except FileNotFoundError:
            pass
        except OSError as e:
            log.warning("upload sweep: %s", e)
            continue
        uploads.discard(path)
    return gone


def start_upload_sweeper(uploads: set, every_s: float = 60.0) -> None:
    """sweep_uploads every `every_s` seconds, for the server's life (python -m app starts it)."""
    def loop():
        while True:
            time.sleep(every_s)
            sweep_uploads(uploads)

    threading.Thread(target=loop, name="upload-sweeper", daemon=True).start()


def export_trace(trace: dict) -> str:
    """Write the trace to a fresh temp file for the download button."""
    cfg = trace.get("config") or {}
    # a loaded trace's mode and rule may say anything ("/", markup): only the engine's words name the file
    mode, rule = (v if isinstance(v, str) and v in words else "unknown"
                  for v, words in ((cfg.get("mode", "run"), MODES + ("run",)), (cfg.get("rule", ""), RULES + ("",))))
    name = f"reanchor-trace-{mode}-{rule}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path = export_folder() / name   # free_traces (or the next trace shown: replace_export) deletes it
    save_trace(path, trace)
    return str(path)


def stats_of(trace: dict | None) -> dict | None:
    """The run's stats; tau always counted from its rounds, as the Compare replay counts it (a trace
    written before tau counted committed tokens, or a crafted one, may say another)."""
    if not trace:
        return None
    if trace.get("stats") and trace.get("complete", True):
        return {**trace["stats"], "tau": run_stats(trace.get("rounds", []))["tau"]}
    return run_stats(trace.get("rounds", []), wall_s=trace.get("elapsed_s"))


def clamp_round(trace: dict | None, i) -> int:
    n = len(trace.get("rounds", [])) if trace else 0
    try:
        i = int(i)
    except (TypeError, ValueError, OverflowError):  # any value through the API
        i = 0
    return max(0, min(i, n - 1)) if n else 0
