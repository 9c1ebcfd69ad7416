"""What the page shows for a session's state: pure functions from the state (the trace shown, the
comparison) to component values. Figures come from app.plots, HTML from app.render."""
from __future__ import annotations

import itertools
import json

import gradio as gr

from engine.analyses import SAMPLED_NOTE, attachment_table, disagreements, tree_round, tree_rounds, tree_text
from engine.options import MODES, RULES, TREE_MODES, UNSHIFTED_MODES

from . import analysis, plots, records, render, session
from .tokentext import trace_pieces

MAX_PAYLOAD = 96 * 1024     # bytes of figure JSON per round update, the prefetched next round included
# Token spans the text view holds: a longer trace (only a loaded one: a run here makes at most 2,048) shows
# this many around the round in view, and follows it (text_follow). 4,096 pieces of at most 200 characters
# are at most ~1 MB of HTML, where a 17 MB trace of 640,000 tokens made 56 MB.
TEXT_TOKENS = 4096


def view_key(state: dict) -> int:
    """A number that changes whenever the session shows another trace: the browser's figure-cache key."""
    if state.get("keyed") is not state.get("trace"):
        state["keyed"], state["view_key"] = state.get("trace"), state.get("view_key", 0) + 1
    return state["view_key"]


def cache_key(state: dict) -> str:
    """The browser's figure-cache key: the trace shown and how its rounds are drawn (phase, projector, folds)."""
    return f"{view_key(state)}-{state.get('phase', 0)}-{int(bool(state.get('projector')))}-{int(bool(state.get('unfold')))}"


def attachment(trace: dict, k: int, state: dict) -> str:
    """Round k's attachment table (engine.analyses.attachment_table) as HTML, or why the trace cannot give one."""
    rec = trace["rounds"][k]
    if not rec.get("shifted") or (trace.get("config") or {}).get("mode") in TREE_MODES:  # trees: tree_note
        return ""
    if state.get("att_of") != view_key(state) or trace.get("complete") is False:  # kept per finished trace
        state["att_of"], state["att"] = view_key(state), {}
    if k in state["att"]:
        return state["att"][k]
    html = _attachment(trace, k, state)
    if len(state["att"]) < 512:
        state["att"][k] = html
    return html


def _attachment(trace: dict, k: int, state: dict) -> str:
    nodes = len(trace["rounds"][k]["trie"]["parents"])
    if nodes > plots.DRAWN_NODES:   # its rules replayed on 8,192 nodes took the server 3-14 s a round
        return (f"<div class='rx-status'>No attachment table: this round has {nodes:,} trie nodes, over the "
                f"{plots.DRAWN_NODES:,} this page replays</div>")
    try:
        table = attachment_table(trace, k, after=_after(trace, k, state))
    except ValueError as e:
        return f"<div class='rx-status'>No attachment table: {render.escape(str(e).split(': ', 1)[-1])}</div>"
    texts = trace.get("token_texts", {})
    note = f"<div class='rx-status'>{render.escape(SAMPLED_NOTE)}.</div>" if table["sampled"] else ""
    return render.attachment_html(table, lambda t: render.token_words(texts, t)) + note


def _after(trace: dict, k: int, state: dict) -> list[int] | None:
    """What a finished trace committed from round k on (None for a live one: the analysis sums it itself)."""
    return (trace.get("output_ids") or [])[round_starts(state)[k]:] if trace.get("complete", True) else None


def tree_note(trace: dict, k: int, state: dict) -> str:
    """A reanchor-tree round's line: what its shifted blocks added over the tree g(0) alone would have grown with
    the same budget (engine.analyses.tree_round), or "" for any other round."""
    if (trace.get("config") or {}).get("mode") != "reanchor-tree":
        return ""
    try:
        t = tree_round(trace, k, after=_after(trace, k, state))
    except (ValueError, KeyError, TypeError) as e:  # an odd loaded trace
        return f"<div class='rx-status'>No tree comparison: {render.escape(str(e))}</div>"
    lines = tree_text(t).split("\n")[1:]  # the head repeats the caption's counts
    lines.insert(0, f"{t['shifted_drafted']} shifted blocks drafted; {t['shifted_nodes']} of the {t['nodes']} "
                    f"nodes and {t['accepted_from_shifted']} of the {t['accepted']} accepted drafts theirs.")
    return "<div class='rx-tree-note rx-fates'>" + "<br>".join(render.escape(x) for x in lines) + "</div>"


# Rounds listed on the page where the rules disagree (the rest: python -m engine explain TRACE --rounds all)
RULE_ROUNDS_SHOWN = 40
RULE_ROUNDS_WORK = analysis.REPLAY_WORK  # path tokens the whole-trace replay may build, its 5 rules together


def rule_rounds(state: dict) -> str:
    """The rounds of the finished trace shown where the rules would accept different numbers of drafts
    (engine.analyses.disagreements), each a button to it; in a reanchor-tree trace, the rounds where the shifted
    blocks changed the accepted length against g(0)'s tree alone (tree_rounds). Kept per trace."""
    trace = state.get("trace")
    if not trace or not trace.get("rounds") or state.get("run") is not None:
        return ""
    if state.get("rule_rounds_of") != view_key(state):
        state["rule_rounds_of"], state["rule_rounds"] = view_key(state), _rule_rounds(trace)
    return state["rule_rounds"]


def _round_button(i: int, label: str, title: str) -> str:
    return (f"<button class='rx-jump' data-round='{int(i)}' title='{render.escape(title)}'>round {int(i)}</button> "
            f"<span>{render.escape(label)}</span>")


def _rule_rounds(trace: dict) -> str:
    mode = (trace.get("config") or {}).get("mode")
    if mode in UNSHIFTED_MODES:
        return ""
    try:
        if mode in TREE_MODES:
            return _tree_rounds(tree_rounds(trace))
        work = sum(analysis.replay_work(trace, "reanchor", rule) for rule in RULES)
        if work > RULE_ROUNDS_WORK:
            return ("<div class='rx-status'>Rounds where the rules disagree: this trace is too long to replay here "
                    "(python -m engine explain TRACE --rounds all lists them).</div>")
        found = disagreements(trace)
    except (ValueError, KeyError, TypeError) as e:  # a trace that cannot answer, or an odd loaded one
        return f"<div class='rx-status'>Rounds where the rules disagree: {render.escape(str(e))}</div>"
    texts = trace.get("token_texts", {})
    items = []
    for t in found["disagree"][:RULE_ROUNDS_SHOWN]:
        counts = ", ".join(f"{rule}{' (ran)' if rule == t['ran'] else ''} {v['accepted']}{'+' if v['cut'] else ''}"
                           for rule, v in t["rules"].items())
        blocks = "; ".join(f"g({b['d']}) a_d <code>{render.escape(render.token_words(texts, b['a_d']))}</code>"
                           for b in t["blocks"][:4])
        more = f" and {len(t['blocks']) - 4} more" if len(t["blocks"]) > 4 else ""
        items.append("<li>" + _round_button(t["round"], f"accepted {counts} · blocks chosen differently:", counts)
                     + f" {blocks}{more}</li>")
    n, shown = len(found["disagree"]), min(len(found["disagree"]), RULE_ROUNDS_SHOWN)
    head = (f"<b>Rounds where the rules disagree</b>: {n} of the {found['rounds']} rounds with shifted blocks, "
            "where another attachment rule would have accepted a different number of drafts (the attachment "
            "table's last row)" + (f"; the first {shown} here" if shown < n else "") + ".")
    note = f"<div class='rx-status'>{render.escape(SAMPLED_NOTE)}.</div>" if found["sampled"] else ""
    return (f"<div class='rx-rule-rounds'>{head}<ul>{''.join(items)}</ul>{note}</div>" if items
            else f"<div class='rx-rule-rounds'>{head}</div>{note}")


def _tree_rounds(found: dict) -> str:
    items = []
    for t in found["changed"][:RULE_ROUNDS_SHOWN]:
        label = f"{t['gain']:+d} accepted drafts ({t['accepted']} against {t['alone']} from g(0)'s tree alone)"
        items.append(f"<li>{_round_button(t['round'], label, label)}</li>")
    head = (f"<b>What the shifted blocks added</b> over the tree g(0) alone would have grown with the same budget: "
            f"more accepted drafts in {found['better']} of {found['compared']} rounds, fewer in {found['worse']}, "
            f"{found['gain']:+d} in all" + (" (along the realised draw: T>0)" if found["sampled"] else "") + ".")
    return f"<div class='rx-rule-rounds'>{head}<ul>{''.join(items)}</ul></div>"


# Rounds of the shipped example traces as round_entry draws them, shared by every session: each page opens on an
# example and fetches its rounds ahead (~0.5 s of the server a page, the same figures for every visitor).
# (path, round, phase, projector, unfold) -> (caption, figure JSON); bounded.
EXAMPLE_ROUNDS: dict[tuple, tuple[str, str]] = {}
EXAMPLE_ROUNDS_MAX = 2048


def round_entry(state: dict, k: int) -> tuple[str, str]:
    """(caption HTML, figure JSON) of round k of the session's trace, drawn with the session's view settings: the
    step-through's phase, the projector setting, the discarded rows unfolded (cache_key names them). A round of a
    shipped example (the one object session.load_example shares) depends on nothing else: drawn once for all."""
    trace, path = state["trace"], state.get("trace_file")
    shared = bool(state.get("example")) and isinstance(path, str) and trace is session.load_example(path)
    key = (path, k, int(state.get("phase") or 0), bool(state.get("projector")), bool(state.get("unfold")))
    if shared and key in EXAMPLE_ROUNDS:
        return EXAMPLE_ROUNDS[key]
    entry = _round_entry(state, k)
    if shared:
        if len(EXAMPLE_ROUNDS) >= EXAMPLE_ROUNDS_MAX:
            EXAMPLE_ROUNDS.clear()
        EXAMPLE_ROUNDS[key] = entry
    return entry


def _round_entry(state: dict, k: int) -> tuple[str, str]:
    trace = state["trace"]
    rounds, texts = trace["rounds"], trace.get("token_texts", {})
    best = instructive(state)
    phase = int(state.get("phase") or 0)
    projector = bool(state.get("projector"))
    cfg = trace.get("config") if isinstance(trace.get("config"), dict) else {}
    cap = records.depth_cap(trace, rounds[k])
    prev = rounds[k - 1] if k > 0 else None
    note = f"The most instructive round: {best[1]}; the page opens here." if best and best[0] == k else None
    seen: set[str] = set()  # the glossary's words, titled on their first appearance in this caption
    step = render.phase_html(phase, render.phase_text(rounds[k], prev, phase, texts, cfg.get("mode"),
                                                      cfg.get("rule")), seen) if phase else ""
    caption = step + render.round_caption(rounds[k], k, len(rounds), cap, note, attachment(trace, k, state),
                                          state.get("teach"), compact=projector and bool(phase), seen=seen) \
        + tree_note(trace, k, state)
    return (f"<div class='rx-proj'>{caption}</div>" if projector else caption,
            plots.round_figure_json(rounds[k], texts, depth_cap=cap, prev=prev, phase=phase,
                                    projector=projector, unfold=bool(state.get("unfold"))))


def round_outputs(state: dict, i: int, prefetch: bool = True):
    """(slider value, caption, round figure payload) for round i of the session's trace; the payload
    also carries round i+1 (prefetch) for the browser's next-round cache, and, for a finished trace, where the
    page fetches other rounds ahead of a jump (`src`: ROUNDS_ROUTE with the session's token; `n`: rounds)."""
    trace = state.get("trace")
    rounds = trace.get("rounds", []) if trace else []
    if not rounds:
        return 0, "No rounds to show.", plots.empty_figure("no round yet").to_json()
    i = session.clamp_round(trace, i)
    caption, fig = round_entry(state, i)
    src = rounds_src(state)
    head = (f'{{"key":{json.dumps(cache_key(state))},"round":{i},"n":{len(rounds)},'
            + (f'"src":{json.dumps(src)},' if src else "") + f'"caption":{json.dumps(caption)},"fig":{fig},"next":')
    if prefetch and i + 1 < len(rounds):
        c2, f2 = round_entry(state, i + 1)
        payload = f'{head}{{"round":{i + 1},"caption":{json.dumps(c2)},"fig":{f2}}}}}'
        if len(payload) <= MAX_PAYLOAD:  # else "next" asks the server (about 45 ms)
            return i, caption, payload
    return i, caption, head + "null}"


# Where the page fetches rounds of its session's trace ahead of a jump (app.__main__ serves it): ROUNDS_ROUTE +
# the session's token (session.Sessions.token: unguessable, this session's only) + ?key=&from=&count=.
ROUNDS_ROUTE = "/rx/rounds/"
ROUNDS_PER_FETCH = 8  # the work of one request: about as much as four round switches


def rounds_src(state: dict) -> str | None:
    """The session's rounds route, while it shows a finished trace (a run's rounds still change its captions)."""
    token = state.get("rounds_token")
    return ROUNDS_ROUTE + token if token and state.get("trace") and state.get("run") is None else None


def rounds_json(state: dict | None, key, start, count) -> tuple[int, str]:
    """(HTTP status, JSON body) of ROUNDS_ROUTE: rounds start .. start+count-1 of the session's trace as round_entry
    draws them, [{round, caption, fig}], under "key", the view they were drawn for. `key` must be the page's
    cache_key: once the view or the trace changed, or a run is under way, no rounds and why ("stale": the page's
    rounds would be another view's; an answer, not an error, as the page meets it in normal use); an unknown session
    404, bad numbers 400 naming the field."""
    def error(status: int, field: str, msg: str) -> tuple[int, str]:
        return status, json.dumps({"error": f"{field}: {msg}"})

    def stale(why: str) -> tuple[int, str]:  # a race the page loses now and then, not an error: it stops fetching
        return 200, json.dumps({"key": None, "rounds": [], "stale": why})

    if state is None:
        return error(404, "rounds", "no such session (it ended, or the link is not this page's)")
    trace = state.get("trace")
    if not trace or not trace.get("rounds") or state.get("run") is not None:
        return stale("this session shows no finished trace now")
    n = len(trace["rounds"])
    if not key:
        return error(400, "key", "missing (the page's figure-cache key)")
    if key != cache_key(state):  # before the range: a page still on the last trace asks for its rounds, not ours
        return stale("the view changed")
    got = {}
    for field, v in (("from", start), ("count", count)):
        try:
            got[field] = int(v)
        except (TypeError, ValueError, OverflowError):
            return error(400, field, "must be a whole number")
    start, count = got["from"], got["count"]
    if not 0 <= start < n:
        return error(400, "from", f"must be a round between 0 and {n - 1}")
    if not 1 <= count <= ROUNDS_PER_FETCH:
        return error(400, "count", f"must be between 1 and {ROUNDS_PER_FETCH}")
    parts = [(k, *round_entry(state, k)) for k in range(start, min(n, start + count))]
    if state.get("trace") is not trace or key != cache_key(state):  # changed while these were drawn
        return stale("the view changed")
    body = ",".join(f'{{"round":{k},"caption":{json.dumps(c)},"fig":{f}}}' for k, c, f in parts)
    return 200, f'{{"key":{json.dumps(key)},"rounds":[{body}]}}'


def instructive(state: dict) -> tuple[int, str] | None:
    """(round, why) the session's finished trace opens on (records.most_instructive), kept per trace with the rounds
    worth teaching (state["teach"], records.teachable_rounds: the caption's list)."""
    trace = state.get("trace")
    if not trace or state.get("run") is not None:
        state["teach"] = []  # a run's rounds still come: its list once it ends
        return None
    if state.get("best_of") != view_key(state):  # a key, not the trace: freeing the trace must free it all
        rounds, texts = trace.get("rounds", []), trace.get("token_texts", {})
        state["teach"] = records.teachable_rounds(rounds, texts)
        state["best_of"], state["best"] = view_key(state), records.most_instructive(rounds, texts, state["teach"])
    return state["best"]


def slider(trace: dict | None, i: int | None = None):
    n = len(trace.get("rounds", [])) if trace else 0
    if i is None:
        return gr.update(maximum=max(n - 1, 1))
    return gr.update(maximum=max(n - 1, 1), value=session.clamp_round(trace, i))


def text(trace: dict | None, tail: int | None = None, window: tuple[int, int] | None = None) -> str:
    if not trace:
        return "<div class='rx-text'></div>"
    prompt, output = trace_pieces(trace)
    return render.text_view(prompt, output, trace.get("rounds", []), tail=tail, window=window)


def round_starts(state: dict) -> list[int]:
    """Output index of each round's first token (the prefill's token is index 0), then the total: kept
    per trace shown."""
    if state.get("starts_of") != view_key(state):
        trace = state.get("trace") or {}
        first = 0 if trace.get("first_token") is None else 1
        state["starts_of"], state["starts"] = view_key(state), list(itertools.accumulate(
            (len(r["new_tokens"]) for r in trace.get("rounds", [])), initial=first))
    return state["starts"]


def text_window(state: dict, i: int) -> tuple[int, int] | None:
    """The output indices the text view shows with round i in view: all (None) up to TEXT_TOKENS, else
    TEXT_TOKENS of them centred on round i's tokens."""
    starts = round_starts(state)
    total = starts[-1]
    if total <= TEXT_TOKENS or not 0 <= i < len(starts) - 1:
        return None
    lo = max(0, min((starts[i] + starts[i + 1]) // 2 - TEXT_TOKENS // 2, total - TEXT_TOKENS))
    return lo, lo + TEXT_TOKENS


def text_shown(state: dict, i: int) -> str:
    """The session's (finished) trace's text view with round i in view; its window kept in the state."""
    state["text_window"] = text_window(state, i)
    return text(state.get("trace"), window=state["text_window"])


def text_follow(state: dict, i: int) -> str | dict:
    """After going to round i: the text view again when it shows a window and round i's tokens lie
    outside it, else gr.skip() (a run's streamed view and a whole text stay as they are)."""
    win, trace = state.get("text_window"), state.get("trace")
    if win is None or not trace or state.get("run") is not None:
        return gr.skip()
    starts = round_starts(state)
    if 0 <= i < len(starts) - 1 and win[0] <= starts[i] and starts[i + 1] <= win[1]:
        return gr.skip()
    return text_shown(state, i)


def run_settings(trace: dict | None) -> str:
    """What the trace shown was run with, in one line (plain text): mode / rule, temperature, seed, drafter. The
    controls say what the next run will use, not what a loaded trace, an example trace or the last run used. A
    loaded trace's words are untrusted: a mode or rule the engine does not know shows as "unknown", names are cut."""
    cfg = (trace or {}).get("config")
    if not isinstance(cfg, dict) or not cfg:
        return ""
    mode, rule = known_word(cfg.get("mode"), MODES), known_word(cfg.get("rule"), RULES)
    parts = [mode if mode in UNSHIFTED_MODES else f"{mode} / {rule}"]  # no shifted blocks: no rule
    t = cfg.get("temperature")
    if isinstance(t, (int, float)) and not isinstance(t, bool):
        parts.append(f"T {t:g}" + (f", seed {cfg['seed']}" if t > 0 and isinstance(cfg.get("seed"), int) else ""))
    drafter = cfg.get("drafter")
    if isinstance(drafter, str) and drafter and drafter != "none":
        # its last part, as the status line names a folder (never a path on the server), without asking the file
        # system about a loaded trace's words
        name = drafter[-200:].replace("\\", "/").rstrip("/").rsplit("/", 1)[-1] or "?"
        parts.append(f"drafter {name[:60] + '…' if len(name) > 60 else name}")
    return " · ".join(parts)


def metrics(state: dict, status: str = "") -> str:
    trace, cmp = state.get("trace"), state.get("compare")
    return render.metrics_view(session.stats_of(trace), session.stats_of(cmp) if cmp else None, status,
                               run_settings(trace))


def analyses(trace: dict | None):
    if not trace or not trace.get("rounds"):
        return {}, plots.empty_figure("no run"), plots.empty_figure("no run")
    res = analysis.compute(trace)
    h, g = analysis.figures(res, "current run")
    return res, h, g


def timeline(trace: dict | None, title: str = "accepted length per round", narrow: bool = False,
             view: int | None = None):
    if not trace or not trace.get("rounds"):
        return plots.empty_figure("no run yet", 200)
    return plots.timeline_figure(trace["rounds"], title, narrow, view)


def timeline_json(trace: dict | None, view: int | None = None) -> str:
    """The inspector's timeline, round `view` framed (the browser moves the frame on each round switch)."""
    return timeline(trace, view=view).to_json()


def show_trace(state: dict, i: int | None = None, status: str = "", new_text: bool = True):
    """Everything that depends on the shown trace, by component name (`ordered` puts them in wiring order): the
    state, text, metrics, slider, caption, figures, analyses, the
    example-trace box (its label, or empty for a run or a loaded trace), the Compare panel (emptied
    when the comparison it showed is gone) and "Go to round of token #" (emptied, unless `new_text` is False:
    a finished run's trace, whose token numbers are those of the text it streamed). i=None: the most
    instructive round (round 0 without one)."""
    trace = state.get("trace")
    if i is None:
        i = (instructive(state) or (0, ""))[0]
    i, caption, fig = round_outputs(state, i)
    state["view"] = i
    res, h, g = analyses(trace)
    tables = analysis.paper_tables(trace, "current run") if trace and trace.get("rounds") else ""
    return {"state": state, "text_box": text_shown(state, i), "metrics": metrics(state, status),
            "slider": slider(trace, i), "caption": caption, "round_plot": fig, "timeline_plot": timeline_json(trace, i),
            "export_btn": gr.update(value=state.get("trace_file"), interactive=bool(state.get("trace_file"))),
            "analysis_json": res, "hist_plot": h, "gain_plot": g,
            "example_trace": gr.update(value=state.get("example_label") if state.get("example") else None),
            "tables": tables, **dict(zip(COMPARE_OUTPUTS, compare_reset(state))),
            "token_no": gr.update(value=None) if new_text else gr.skip(), "rule_rounds": rule_rounds(state)}


def ordered(views: dict, names: tuple[str, ...] | None = None) -> tuple:
    """Views by name as the values of the components `names` (default: the state, then VIEW_OUTPUTS) in order, as
    app.ui wires them; a name not given is skipped (the component keeps its value)."""
    names = ("state",) + VIEW_OUTPUTS if names is None else names
    return tuple(views.get(n, gr.skip()) for n in names)


def compare_reset(state: dict) -> tuple:
    """The Compare panel's outputs: emptied once, when the comparison it shows no longer belongs to the
    trace shown; left as it is otherwise."""
    if state.get("compare") is not None or not state.get("compare_shown"):
        return (gr.skip(),) * len(COMPARE_OUTPUTS)
    state["compare_shown"] = False
    empty = plots.empty_figure("no comparison yet", 200).to_json()
    return (render.metrics_view(None, status="no comparison yet"), empty,
            render.metrics_view(None, status="this run"), empty, empty, empty, {}, "")


# The Compare panel's components, in the order compare_views and compare_reset return them (app.ui).
COMPARE_OUTPUTS = ("cmp_metrics", "cmp_timeline", "cmp_a_metrics", "cmp_a_timeline", "cmp_a_cf", "cmp_b_cf",
                   "cmp_json", "cmp_table")
# The components show_trace's views go to, after the state, in the order app.ui wires them (views.ordered).
VIEW_OUTPUTS = ("text_box", "metrics", "slider", "caption", "round_plot", "timeline_plot", "export_btn",
                "analysis_json", "hist_plot", "gain_plot", "example_trace", "tables") + COMPARE_OUTPUTS + ("token_no",
                                                                                                "rule_rounds")
# What a round switch shows (Callbacks.goto), in the order app.ui wires them.
NAV_OUTPUTS = ("slider", "caption", "round_plot", "follow", "text_box")


def known_word(v, words) -> str:
    """A loaded trace's mode or rule as shown: one of the engine's words, else "unknown" (it may say anything)."""
    return v if isinstance(v, str) and v in words else "unknown"


def run_name(trace: dict) -> str:
    cfg = trace.get("config") or {}
    return f"{known_word(cfg.get('mode'), MODES)} / {known_word(cfg.get('rule'), RULES)}"


def compare_views(state: dict):
    """Side by side: (comparison metrics, its timeline, this run's metrics, its timeline, the comparison's
    assembly on this run's rounds, this run's assembly on the comparison's rounds, counterfactual totals,
    the totals as a table); figures as JSON (app.page.js_round_plot draws them, a click goes to the round). Both
    timelines share their axes, and both counterfactuals theirs."""
    a, b = state.get("trace"), state.get("compare")
    an, bn = run_name(a or {}), run_name(b or {})
    b_cfg, a_cfg = (b or {}).get("config") or {}, (a or {}).get("config") or {}
    a_cf, a_sum = analysis.counterfactual(a, known_word(b_cfg.get("mode"), MODES), known_word(b_cfg.get("rule"), RULES),
                                          f"comparison's {bn}")
    b_cf, b_sum = analysis.counterfactual(b, known_word(a_cfg.get("mode"), MODES), known_word(a_cfg.get("rule"), RULES),
                                          f"this run's {an}")
    b_tl, a_tl = timeline(b, f"comparison: {bn}", narrow=True), timeline(a, f"this run: {an}", narrow=True)
    plots.share_axes([a_tl, b_tl])
    plots.share_axes([a_cf, b_cf])
    totals = {f"{bn} on this run's rounds": a_sum, f"{an} on the comparison's rounds": b_sum}
    return (render.metrics_view(session.stats_of(b), status=f"comparison: {bn}"), b_tl.to_json(),
            render.metrics_view(session.stats_of(a), status=f"this run: {an}"), a_tl.to_json(),
            a_cf.to_json(), b_cf.to_json(), totals, render.counterfactual_table(totals))
