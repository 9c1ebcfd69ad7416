"""Starting and streaming model runs from the page: the controls checked with the engine's own
parsers (engine.options), errors worded for a person, and the live trace (engine.trace) a run fills."""
from __future__ import annotations

import html
import logging
import threading
import time
from dataclasses import dataclass, replace

import gradio as gr

from engine.decode import DecodeConfig
from engine.decode.cost import budget_for
from engine.errors import InputError
from engine.options import DEFAULT_APP_MAX_NEW_TOKENS, MODES, RULES, parse_max_shifted, parse_max_trie_nodes, to_int
from engine.trace import TextPieces, add_round, new_trace, unicode_problem

from . import session
from .tokentext import bidi_visible

log = logging.getLogger("reanchor.app")


def toast_text(message: str) -> str:
    """A message as text for Gradio's toast, which shows it as HTML: a trace's strings (config.target, a value
    quoted in a refusal) carried live links into it. '<' and '&' escaped, bidirectional controls visible."""
    return html.escape(bidi_visible(message), quote=False)


def bad_input(message: str, title: str = "Bad input") -> gr.Error:
    """A user's mistake: a toast on the page and one line in the server log (no traceback)."""
    log.info("%s: %s", title.lower(), message)
    return gr.Error(toast_text(message), title=title, print_exception=False)


def field_error(e: InputError, title: str = "Bad input") -> gr.Error:
    return bad_input(f"{session.field_label(e.field)}: {e.message}", title)


@dataclass(frozen=True)
class Settings:
    """A run's settings, checked: what the run controls say (parse_inputs) or what a trace was run with
    (trace_settings). `prompt_ids`, when set, are run as they are (a trace's own tokens), else `prompt` is encoded."""
    prompt: str
    mode: str
    rule: str
    temperature: float = 0.0
    seed: int = 0
    max_new_tokens: int = DEFAULT_APP_MAX_NEW_TOKENS
    max_shifted: int | str | None = None
    max_trie_nodes: int | str | None = None
    prompt_ids: tuple[int, ...] | None = None

    def with_assembly(self, mode: str, rule: str) -> "Settings":
        return replace(self, mode=mode, rule=rule)

    def decode_config(self) -> DecodeConfig:
        return DecodeConfig(mode=self.mode, rule=self.rule, temperature=self.temperature, seed=self.seed,
                            max_new_tokens=self.max_new_tokens, max_shifted=self.max_shifted,
                            max_trie_nodes=self.max_trie_nodes)


def check_choice(label: str, value, allowed) -> str:
    if not isinstance(value, str) or value not in allowed:
        raise bad_input(f"{label}: {str(value)[:80]!r} is not one of: {', '.join(allowed)}")
    return value


def parse_inputs(prompt, mode, rule, temperature, seed, max_new, shifted="all", nodes="all",
                 choices: tuple[str, str] = ("Mode", "Attachment rule")) -> Settings:
    """Check the controls (values as sent: the page's, or anything through the API); raise a gr.Error
    naming the control (the app keeps serving). `choices`: the labels of the mode and rule controls."""
    if not isinstance(prompt, str):
        raise bad_input(f"Prompt: must be text, got {str(prompt)[:80]!r}")
    if not prompt.strip():
        raise bad_input("Prompt: is empty; type a prompt or pick an example")
    if len(prompt) > session.MAX_PROMPT_CHARS:
        raise bad_input(f"Prompt: {len(prompt)} characters, at most {session.MAX_PROMPT_CHARS}")
    problem = unicode_problem(prompt)   # the API can send a lone surrogate, which no tokenizer or page can take
    if problem:
        raise bad_input(f"Prompt: {problem}")
    check_choice(choices[0], mode, MODES)
    check_choice(choices[1], rule, RULES)
    try:
        t = float(temperature)
    except (TypeError, ValueError):
        raise bad_input(f"Temperature: {str(temperature)[:80]!r} is not a number") from None
    if not 0.0 <= t <= 10.0:
        raise bad_input(f"Temperature: must be between 0 and 10, got {t}")
    try:
        s = to_int(seed, "seed", 0, 2**31 - 1)
        n = to_int(max_new, "max_new_tokens", 1, session.APP_MAX_NEW_TOKENS)
        k = parse_max_shifted("all" if shifted is None else shifted)
        N = parse_max_trie_nodes("all" if nodes is None else nodes)
    except InputError as e:
        raise field_error(e) from None
    return Settings(prompt, mode, rule, t, s, n, k, N)


def trace_settings(trace: dict, label: str) -> Settings:
    """What a trace was run with (its prompt's tokens, temperature, seed, length, budgets), for running it again
    with another assembly; a gr.Error naming `label` when the trace does not say."""
    cfg = trace.get("config") if isinstance(trace.get("config"), dict) else {}
    ids = trace.get("prompt_ids")
    if not isinstance(ids, list) or not ids:
        raise bad_input(f"{label}: the trace shown records no prompt tokens")
    try:
        t = float(cfg.get("temperature") or 0.0)
        n = to_int(cfg.get("max_new_tokens"), "max_new_tokens", 1, session.APP_MAX_NEW_TOKENS)
        s = to_int(cfg.get("seed") or 0, "seed", 0, 2**31 - 1)
        k = parse_max_shifted("all" if cfg.get("max_shifted") is None else cfg["max_shifted"])
        N = parse_max_trie_nodes("all" if cfg.get("max_trie_nodes") is None else cfg["max_trie_nodes"])
    except (InputError, TypeError, ValueError) as e:
        raise bad_input(f"{label}: the trace shown records no usable settings ({e})") from None
    return Settings(str(trace.get("prompt_text") or ""), str(cfg.get("mode")), str(cfg.get("rule")), t, s, n, k, N,
                    tuple(int(i) for i in ids))


def engine_or_error(loader, drafter: str | None = None):
    """The Engine of the chosen drafter (loaded on its first run), or a gr.Error naming the control."""
    if loader.ready:
        try:
            return loader.engine_for(drafter)
        except InputError as e:
            raise field_error(e) from None
    if loader.error:
        raise bad_input(f"Model: loading failed ({loader.error}); restart the app with other --target/--drafter",
                        "Model")
    if not loader.enabled:
        raise bad_input("Model: this app runs replay-only (--no-model); load a trace instead", "Model")
    raise bad_input("Model: still loading; try again in a few seconds (see the status line)", "Model")


def start_run(engine, settings: Settings):
    """(run, prompt ids) or a gr.Error naming the field the engine rejected."""
    cfg = settings.decode_config()
    try:
        ids = list(settings.prompt_ids) if settings.prompt_ids else engine.encode_prompt(settings.prompt)
        run = engine.run(ids, cfg, budget_for(engine, cfg))
    except InputError as e:
        raise field_error(e) from None
    return run, ids


def stream_run(engine, run, ids, config: dict):
    """Iterate a run, yielding (live trace, record) per round; the live trace follows the trace schema.

    The run is stopped in `finally`, so a closed generator (Stop, client gone) ends it.
    """
    tok = engine.models.tokenizer
    live, pieces = new_trace(config, ids, tok), TextPieces(tok)
    live["elapsed_s"] = 0.0
    t0 = time.monotonic()
    run.time_limited = False

    def time_up() -> None:  # the per-run limit: Run.stop() ends even a round under way within a layer
        if run.result is None:
            run.time_limited = True
            run.stop()

    timer = threading.Timer(session.RUN_SECONDS, time_up)
    timer.daemon = True
    timer.start()
    try:
        for rec in run:
            add_round(live, rec, tok, pieces)
            live["elapsed_s"] = time.monotonic() - t0
            yield live, rec
    finally:
        timer.cancel()
        run.stop()
        session.give_back_memory()  # a run's buffers (logits of up to 1,024 nodes) back to the system


def end_status(run) -> str:
    """How a finished run of the page ended, in the status line's words."""
    if getattr(run, "time_limited", False):
        return f"stopped at the time limit ({session.RUN_SECONDS:g} s a run)"
    return "stopped" if (run.result or {}).get("stopped") else "done"
