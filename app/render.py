"""Escaped HTML for the streaming text (coloured by provenance) and the metrics strip."""
from __future__ import annotations

from engine.trace import token_sources

from . import records
from .plots import BASE_COLOR, BONUS_COLOR, D_COLORS, SHARED_COLOR
from .tokentext import escape, text_html

PROMPT_TAIL = 600  # prompt tokens shown (the rest is elided)

CSS = (
    ".rx-text{white-space:pre-wrap;font-family:ui-monospace,'DejaVu Sans Mono',Menlo,Consolas,monospace;"
    "font-size:13px;line-height:1.55;max-height:460px;overflow-y:auto;padding:8px;border:1px solid #ddd;"
    "border-radius:6px;background:#fff;color:#222}"
    ".rx-text span.cur{outline:2px solid #111;outline-offset:-1px;font-weight:600}"
    ".rx-fates{font-size:13px;color:#444}.rx-note{font-size:13px;color:#8a5a00;font-weight:600}"
    ".rx-text span[data-r]{cursor:pointer;border-radius:2px}"
    ".rx-text span[data-r]:hover{outline:1px solid #333}"
    ".rx-text .sel{outline:2px solid #111}"
    ".rx-p{color:#8a8f98}.rx-text .rx-elided{color:#8a5a00;font-style:italic}"
    f".rx-b{{background:{BASE_COLOR}22}}"
    f".rx-x{{background:{BONUS_COLOR}55}}"
    + "".join(f".rx-s{i}{{background:{c}44}}" for i, c in enumerate(D_COLORS))
    + ".rx-legend span{display:inline-block;padding:1px 6px;margin-right:6px;border-radius:3px;font-size:12px}"
    ".rx-metrics{display:flex;flex-wrap:wrap;gap:6px;font-size:13px}"
    ".rx-metrics div{padding:4px 10px;border:1px solid #ddd;border-radius:6px;background:#fafafa}"
    ".rx-metrics b{font-size:15px}"
    ".rx-cf{border-collapse:collapse;font-size:13px}.rx-cf th,.rx-cf td{border:1px solid #ddd;padding:3px 8px;"
    "text-align:left}.rx-cf td{text-align:right}"
)

LEGEND = (
    "<div class='rx-legend'><span class='rx-p'>prompt</span><span class='rx-b'>accepted from baseline</span>"
    + "".join(f"<span class='rx-s{i}'>g({i + 1})</span>" for i in range(len(D_COLORS)))
    + f"<span>… (colours repeat every {len(D_COLORS)} offsets: hover a token for its block)</span>"
    "<span class='rx-x'>bonus (target)</span></div>"
)


def source_style(src: str) -> tuple[str, str]:
    """(CSS class, hover label) of a committed token's source: 'baseline', 'd<k>' or 'bonus'."""
    if src == "baseline":
        return "rx-b", "baseline"
    if src.startswith("d"):
        return f"rx-s{(int(src[1:]) - 1) % len(D_COLORS)}", f"gained via g({src[1:]})"
    return "rx-x", "bonus"


def text_view(prompt: list[str], output: list[str], rounds: list[dict], selected_round: int | None = None,
              tail: int | None = None, window: tuple[int, int] | None = None) -> str:
    """The prompt (grey) and every generated token coloured by provenance.

    `prompt` and `output`: the text of each prompt token and of each generated token (app.tokentext.
    trace_pieces), so characters split over tokens show as written. Every generated token is a span with
    data-r (its round, -1 for the prefill token) and data-k (its index in output_ids); its title names
    round, index and source. All token text is escaped.
    tail: show only the last `tail` generated tokens, for updates while a long run streams: the page rebuilds
    the view span by span on every update (tests/test_app_long_run.py measures it).
    window: (first, end) output indices: only those tokens are shown, the rest counted in a note on each
    side (a loaded trace may hold 640,000 tokens: as spans, 56 MB of HTML, and the page's highlight of a
    round scans them all on every step; app.views.TEXT_TOKENS).
    """
    parts = ["<div class='rx-text' id='rx-text'>"]
    shown = prompt[-PROMPT_TAIL:]
    if len(prompt) > len(shown):
        parts.append(f"<span class='rx-p'>[… {len(prompt) - len(shown)} prompt tokens]</span>")
    parts.append("<span class='rx-p'>" + text_html("".join(shown)) + "</span>")
    n_gen = sum(len(rec["new_tokens"]) for rec in rounds)  # token_sources gives one per new token
    first = 1 if len(output) > n_gen else 0  # the prefill's token leads (none before a run starts)
    total = first + n_gen
    lo, hi = 0, total
    if window is not None:
        lo, hi = max(0, window[0]), min(total, window[1])
        if lo:
            parts.append(f"<span class='rx-p rx-elided'>[… {lo:,} earlier tokens: go to one of their rounds "
                         f"to show them here]</span>")
    elif tail is not None and len(output) > tail:
        lo = len(output) - tail
        parts.append(f"<span class='rx-p'>[… {lo} earlier tokens]</span>")
    if first == 1 and lo == 0:
        parts.append(f"<span class='rx-x' data-r='-1' data-k='0' title='#0 prefill'>{text_html(output[0])}</span>")
    k = first
    for ri, rec in enumerate(rounds):
        n = len(rec["new_tokens"])
        if k >= hi:
            break
        if k + n > lo:  # only the rounds shown are looked into
            sel = " sel" if selected_round == ri else ""
            for j, src in enumerate(token_sources(rec)):
                if lo <= k + j < hi:
                    cls, label = source_style(src)
                    parts.append(f"<span class='{cls}{sel}' data-r='{ri}' data-k='{k + j}' title='#{k + j} round "
                                 f"{ri} {label}'>{text_html(output[k + j] if k + j < len(output) else '')}</span>")
        k += n
    if window is not None and hi < total:
        parts.append(f"<span class='rx-p rx-elided'>[… {total - hi:,} later tokens: go to one of their rounds to "
                     f"show them here]</span>")
    parts.append("</div>")
    return "".join(parts)


def _fmt(v, nd=2):
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.{nd}f}"
    return str(v)


def metrics_view(stats: dict | None, compare: dict | None = None, status: str = "", settings: str = "") -> str:
    """tau, rounds, target calls, tokens/s; with a comparison run, its values and the ratios; the status, then
    `settings` (plain text: what the trace shown was run with, app.views.run_settings)."""
    if not stats:
        return f"<div class='rx-metrics'><div>{escape(status or 'no run yet')}</div></div>"
    cells = [("τ", _fmt(stats.get("tau"))), ("rounds", _fmt(stats.get("rounds"))),
             ("target calls", _fmt(stats.get("target_calls"))), ("new tokens", _fmt(stats.get("new_tokens"))),
             ("tokens/s", _fmt(stats.get("tokens_per_s"), 1))]
    if compare:
        ct, cs = compare.get("tau") or 0, compare.get("tokens_per_s") or 0
        cells.append(("vs comparison τ", f"{_fmt(ct)} → ×{_fmt((stats.get('tau') or 0) / ct) if ct else '–'}"))
        cells.append(("speed ratio", f"×{_fmt((stats.get('tokens_per_s') or 0) / cs) if cs else '–'}"))
    out = "".join(f"<div>{escape(k)} <b>{escape(v)}</b></div>" for k, v in cells)
    if status:
        out += f"<div>{escape(status)}</div>"
    if settings:
        out += f"<div class='rx-settings'>{escape(settings)}</div>"
    return f"<div class='rx-metrics'>{out}</div>"


def fates_line(fates: list[dict], budget: dict | None = None) -> str:
    """The shifted blocks in one line of plain text: where each attached block sat natively and where it
    went, and the discarded ones grouped by why (records.FATE_WORDS)."""
    if not fates:
        return ""
    att = [f for f in fates if f["fate"] == "attached"]
    parts = []
    if att:
        parts.append("attached (native → site position): " + ", ".join(
            f"g({f['d']}) {f['native']}→{f['native'] - f['d'] + f['attached'][0]}"
            + (f" +{len(f['attached']) - 1} more sites" if len(f["attached"]) > 1 else "")
            + (f" cut to {f['verified']}/{f['full']} ({records.FATE_SHORT[f['cut']]})" if f["cut"] else "")
            for f in att))
    for why in ("no-site", "rule", "budget", "depth"):
        ds = [f"g({f['d']})" for f in fates if f["fate"] == why]
        if ds:
            parts.append(f"discarded {', '.join(ds)}: {records.FATE_WORDS[why]}")
    avail, drafted = (budget or {}).get("available"), (budget or {}).get("shifted")
    if isinstance(avail, int) and isinstance(drafted, int) and avail > drafted:
        parts.append(f"{avail - drafted} more offsets not drafted: over the cost budget")
    return "Shifted blocks: " + "; ".join(parts) + "."


def round_caption(rec: dict, index: int, total: int, depth_cap: int | None = None, note: str | None = None) -> str:
    """HTML (escaped: a loaded trace's numbers are no markup): the round's arithmetic, then what became of
    each shifted block, then `note` (why the page opened on this round)."""
    lens = records.round_lengths(rec)
    fates = records.block_fates(rec, depth_cap)
    attached = sum(1 for f in fates if f["fate"] == "attached")
    head = escape(f"Round {index} (rounds 0–{total - 1}): anchor at position {rec['anchor_pos']}, "
                  f"{len(rec.get('shifted', []))} shifted blocks ({attached} attached), "
                  f"{len(rec['trie']['tokens'])} trie nodes, accepted {lens['accepted']} "
                  f"= {lens['baseline']} baseline-alone"
                  + (f" + {lens['branches']} through tree branches" if lens["branches"] else "")
                  + f" + {lens['shifted']} shifted gain, "
                  f"draft {rec.get('draft_ms', 0):.1f} ms, verify {rec.get('verify_ms', 0):.1f} ms"
                  + "".join(f", {k} {v:.1f} ms" for k, v in (rec.get("stages_ms") or {}).items()
                            if k not in ("draft", "verify")))  # the round's own work (engine/trace.py STAGES)
    line = fates_line(fates, rec.get("budget") if isinstance(rec.get("budget"), dict) else None)
    out = head + (f"<br><span class='rx-fates'>{escape(line)}</span>" if line else "")
    if note:
        out += f"<br><span class='rx-note'>★ {escape(note)}</span>"
    return out


def _chip(color: str, text: str, shape: str = "■") -> str:
    return f"<span style='color:{color}'>{shape}</span> {escape(text)}"


FIGURE_LEGEND = (
    "<div class='rx-legend' style='font-size:12px'>grid rows: "
    + " ".join([_chip(BASE_COLOR, "g(0): the baseline block"),
                _chip(D_COLORS[0], "g(d) at t: shifted block d attached at baseline index t (colour per d, "
                                   "name on the row)"),
                _chip("#c9ccd1", "g(d) ✗ why: discarded (no site, rule, budget, depth); ✂ cut short"),
                _chip("#1a9e50", "accepted cell", "□"), _chip("#111", "matching site", "○"),
                _chip("#111", "chosen site (bold)", "◯"), _chip("#111", "also attached (rule all)", "◇"),
                _chip("#111", "native position of g(d) (hover: its fate)", "│"),
                _chip("#a07800", "past g(0)'s block: reached only through shifted blocks", "▧")])
    + "<br>trie: "
    + " ".join([_chip(BASE_COLOR, "baseline only", "●"), _chip(SHARED_COLOR, "shared by baseline and g(d)", "●"),
                _chip(D_COLORS[0], "g(d) only (colour per d; the branch's block named at its end)", "●"),
                _chip("#1a9e50", "accepted path", "━"), _chip(BONUS_COLOR, "bonus (target)", "★"),
                "<span>labels: the accepted path and each branch's first token; hover for the rest</span>"])
    + "</div>"
)


# The counterfactual totals (engine.analyses.counterfactual_summary), in plain words.
CF_ROWS = (("rounds", "rounds replayed"), ("tau", "τ of the run"), ("counterfactual_tau", "τ with the other assembly"),
           ("better", "rounds where it accepts more"), ("worse", "rounds where it accepts fewer"),
           ("same", "rounds the same"), ("extra_drafts", "drafts gained (+) or lost (−) in all"),
           ("cut", "rounds at the run's end (replay cut short: at least)"))


def counterfactual_table(totals: dict) -> str:
    """A small table: one column per replay (name: its summary, or {"unavailable": why})."""
    names = list(totals)
    head = "".join(f"<th>{escape(n)}</th>" for n in names)
    rows = []
    for key, label in CF_ROWS:
        cells = "".join(f"<td>{escape(_fmt(v.get(key)) if 'unavailable' not in v else '–')}</td>"
                        for v in totals.values())
        rows.append(f"<tr><th>{escape(label)}</th>{cells}</tr>")
    why = "".join(f"<div>{escape(n)}: {escape(str(v['unavailable']))}</div>"
                  for n, v in totals.items() if "unavailable" in v)
    return (f"<table class='rx-cf'><tr><th>counterfactual totals</th>{head}</tr>{''.join(rows)}</table>"
            f"<div class='rx-status'>{why}</div>")
