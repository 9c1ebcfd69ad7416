"""Escaped HTML for the streaming text (coloured by provenance) and the metrics strip."""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from engine.options import TREE_MODES
from engine.trace import token_sources

from . import assets, glossary, records
from .palette import ACCEPT_COLOR, BASE_COLOR, BONUS_COLOR, D_COLORS, PALETTE_VARS, SHARED_COLOR
from .tokentext import _shown, escape, piece, text_html

PROMPT_TAIL = 600  # prompt tokens shown (the rest is elided)

PALETTE_CSS = assets.css_vars(PALETTE_VARS)
CSS = PALETTE_CSS + assets.read("text.css")

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
            both = None
            for j, src in enumerate(token_sources(rec)):
                if lo <= k + j < hi:
                    cls, label = source_style(src)
                    if src.startswith("d"):  # every block whose path proposed it, not the first one alone
                        both = records.node_sources(rec) if both is None else both
                        acc = rec.get("accepted_nodes", [])
                        others = [d for d in (both[int(acc[j + 1])] if j + 1 < len(acc) else []) if d != int(src[1:])]
                        if others:
                            label += " (also proposed by " + ", ".join(f"g({d})" for d in others) + ")"
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


def token_words(texts: dict, tok) -> str:
    """A token's visible text (plain; escape it where it goes)."""
    return _shown(piece(texts, int(tok)), 16)


def phase_html(phase: int, sentence: str, seen: set[str] | None = None) -> str:
    """The step-through's line over the caption: the phase, its name, its sentence (escaped; the glossary's words
    titled on their first appearance, `seen`: those titled before)."""
    return (f"<div class='rx-phase' data-phase='{int(phase)}'><b>Step {int(phase)} of {len(PHASES)}: "
            f"{glossary.mark(escape(PHASES[phase - 1]), seen)}.</b> {glossary.mark(escape(sentence), seen)}</div>")


def teach_line(teach: list[tuple[int, float]], index: int) -> str:
    """The rounds worth teaching (records.teachable_rounds), best first, each a link to its round (page.JS_PLOT)."""
    if not teach:
        return ""
    links = " ".join(f"<a data-goto='{int(i)}' title='teach score {s:.1f}'>{'[' + str(int(i)) + ']' if i == index else int(i)}</a>"
                     for i, s in teach)
    return f"<span class='rx-teach rx-note'>★ Rounds worth teaching, best first: {links}</span>"


def round_caption(rec: dict, index: int, total: int, depth_cap: int | None = None, note: str | None = None,
                  table: str = "", teach: list[tuple[int, float]] | None = None, compact: bool = False,
                  seen: set[str] | None = None) -> str:
    """HTML (escaped: a loaded trace's numbers are no markup): the round's arithmetic, then what became of
    each shifted block, then `note` (why the page opened on this round) and the rounds worth teaching (`teach`).
    `compact` (a projector phase: its sentence and the figure on one screen): all of it folded under one line.
    The glossary's words are titled on their first appearance (`seen`: those titled before)."""
    seen = set() if seen is None else seen
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
                            if k not in ("draft", "verify")))  # the round's own work (engine/trace/records.py STAGES)
    budget = rec.get("budget") if isinstance(rec.get("budget"), dict) else None
    line = fates_line(fates, budget)
    if budget and budget.get("plain") is True:
        line = ("A plain target step, no draft: in the rounds before, the auto budget found no tree worth its "
                "draft on this machine (it drafts again now and then, to check).")
    out = glossary.mark(head, seen) + (f"<br><span class='rx-fates'>{glossary.mark(escape(line), seen)}</span>"
                                       if line else "")
    if note:
        out += f"<br><span class='rx-note'>★ {glossary.mark(escape(note), seen)}</span>"
    if teach:
        out += "<br>" + teach_line(teach, index)
    if compact:
        out = (f"<details class='rx-more'><summary>Round {index} (rounds 0–{total - 1}): its numbers, each shifted "
               "block's fate"
               + (", why the page opened here" if note else "") + "</summary>" + out + "</details>")
    if table:  # its open state kept across rounds (page.JS_PLOT)
        out += ("<details class='rx-att-box' id='rx-att'><summary>Why each block attached where it did: the "
                "attachment table (every rule, from this trace alone)</summary>" + glossary.mark(table, seen)
                + "</details>")
    return out


def _chip(color: str, text: str, shape: str = "■") -> str:
    return f"<span style='color:{color}'>{shape}</span> {escape(text)}"


FIGURE_LEGEND = (
    "<div class='rx-legend rx-figlegend'>grid rows: "
    + " ".join([_chip("#8d4b4b", "rejected (prev.): the drafts the previous round rejected, whose states this round "
                                 "keeps"),
                _chip("#2f2f2f", "target said: the target's token after each (a_d at position anchor+d)"),
                _chip(BASE_COLOR, "g(0): the baseline block"),
                _chip(D_COLORS[0], "g(d) at t: shifted block d attached at baseline index t (colour per d, "
                                   "name on the row)"),
                _chip("#c9ccd1", "g(d) ✗ why: discarded (no site, rule, budget, depth), folded into one row "
                                 "(click it); ✂ cut short"),
                _chip("#1a9e50", "accepted cell (bar under the token)", "▁"), _chip("#111", "matching site", "○"),
                _chip("#111", "chosen site", "●"), _chip("#111", "also attached (rule all)", "◇"),
                _chip("#111", "native position of g(d) (hover: its fate)", "▼"),
                _chip("#a07800", "past g(0)'s block: reached only through shifted blocks", "▧")])
    + "<br>trie: "
    + " ".join([_chip(BASE_COLOR, "baseline only", "●"), _chip(SHARED_COLOR, "shared by baseline and g(d)", "●"),
                _chip(D_COLORS[0], "g(d) only (colour per d; the branch's block named at its end)", "●"),
                _chip("#555", "under a node: a dot per block that proposed it", "▪"),
                _chip(ACCEPT_COLOR, "accepted path", "━"), _chip(BONUS_COLOR, "bonus (target)", "★"),
                _chip("#d1495b", "retained for the next round", "◯"),
                "<span>labels: the accepted path and each branch's first token; hover for the rest</span>"])
    + "</div>"
)
FIGURE_LEGEND = glossary.mark(FIGURE_LEGEND)

# The words the page uses, each in a sentence (the glossary panel under the legend): app.glossary, their one home.
GLOSSARY = glossary.panel()


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


def attachment_html(table: dict, token_text) -> str:
    """engine.analyses.attachment_table as a small HTML table (escaped): one row per shifted block with a site (the
    blocks with none counted under it), one column per rule, the rule the run used marked; the last row, the drafts
    the round accepts with each rule. `token_text(id)`: a token's visible text."""
    rules = list(table["rules"])
    mark = lambda r: " class='ran'" if r == table["ran"] else ""  # noqa: E731
    head = "".join(f"<th{mark(r)}>{escape(r)}{' (ran)' if r == table['ran'] else ''}</th>" for r in rules)
    rows, none = [], []
    for b in table["blocks"]:
        if not b["sites"]:
            none.append(f"g({b['d']})")
            continue
        cells = "".join(f"<td{mark(r)}>{escape(', '.join(map(str, b['choice'][r])) or '–')}</td>" for r in rules)
        rows.append(f"<tr><th>g({b['d']})</th><td>{b['d']} (pos {b['native']})</td>"
                    f"<td class='tok'>{escape(token_text(b['a_d']))}</td>"
                    f"<td>{escape(', '.join(map(str, b['sites'])))}</td>{cells}</tr>")
    acc = "".join(f"<td{mark(r)}><b>{table['rules'][r]['accepted']}{'+' if table['rules'][r]['cut'] else ''}</b>"
                  "</td>" for r in rules)
    rows.append(f"<tr class='rx-att-acc'><th colspan='4'>drafts accepted with this rule</th>{acc}</tr>")
    foot = (f"<div class='rx-status'>No site (discarded under every rule): {escape(', '.join(none))}.</div>"
            if none else "")
    return ("<table class='rx-att' data-round='" + str(int(table["round"])) + "'><tr><th>block</th><th>native index"
            "</th><th>a_d</th><th>sites (t: g(0)[t] = a_d)</th>" + head + "</tr>" + "".join(rows) + "</table>" + foot)


# ---------------------------------------------------------------- the step-through of one round

# The phases of one round, in order (app.plots.PHASE_PARTS: what each points at in the figure).
PHASES = ("the previous round's rejected suffix", "the anchor and g(0)", "the re-anchored blocks g(d)",
          "matching: where a_d occurs in g(0)", "the rule's site choice and each block's fate",
          "the merged trie", "one verify pass and its mask", "the accepting walk and the bonus",
          "what is retained for the next round")


def _q(texts: dict, tok) -> str:
    """A token as words show it: its visible text in quotes (plain text; escaped with the sentence)."""
    return "“" + _shown(piece(texts, int(tok)), 16) + "”"


def _list(items: list[str], most: int = 4) -> str:
    return ", ".join(items[:most]) + (f" and {len(items) - most} more" if len(items) > most else "")


@dataclass(frozen=True)
class _Round:
    """What phase_text's sentences read of one round (and the previous one's, for phase 1), computed once."""
    rec: dict
    prev: dict | None
    texts: dict
    mode: str | None
    rule: str | None

    @cached_property
    def s(self) -> int:
        return int(self.rec["anchor_pos"])

    @cached_property
    def a(self) -> int:
        return int(self.rec.get("accepted", 0))

    @property
    def tree(self) -> bool:
        return self.mode in TREE_MODES

    @cached_property
    def fates(self) -> list[dict]:
        return records.block_fates(self.rec)

    @property
    def shifted(self) -> list[dict]:
        return self.rec.get("shifted", [])

    @cached_property
    def att(self) -> list[dict]:
        return [f for f in self.fates if f["fate"] == "attached"]

    @property
    def n_nodes(self) -> int:
        return len(self.rec["trie"]["tokens"])

    def q(self, tok) -> str:
        return _q(self.texts, tok)


def _rejected_suffix(r: _Round) -> str:
    from .plots import retained_path  # the figure draws the same P*

    rec, prev, s = r.rec, r.prev, r.s
    if prev is None:
        return ("Round 0 follows the prompt's prefill: there is no rejected suffix before it, so it drafts "
                "g(0) alone.")
    tokens, pa = retained_path(prev)
    rej = tokens[pa + 1:]
    if not rej:
        return (f"Round {prev['round']} accepted its whole path ({pa} drafts): nothing was rejected, so this "
                "round drafts g(0) alone.")
    said = [f"{r.q(b['tokens'][0])} at {s + b['d']}" for b in r.shifted]
    return (f"Round {prev['round']} accepted {pa} drafts; at position {s} the target rejected the draft "
            f"{r.q(rej[0])} and wrote {r.q(rec['anchor'])} instead (the bonus, this round's anchor). "
            f"Its {len(rej)} rejected drafts at positions {s}–{s + len(rej) - 1} keep their target states, and "
            f"after each the target had computed its own next token: " + (_list(said) or "none kept") + ".")


def _anchor_and_g0(r: _Round) -> str:
    rec, s = r.rec, r.s
    head = f"The anchor {r.q(rec['anchor'])} stands at position {s}. "
    if r.tree:
        return head + (f"The drafter ranks tokens for positions {s + 1}–{s + len(rec['baseline']) - 1}; g(0) is "
                       f"its top-1 row ({_list([r.q(t) for t in rec['baseline'][1:]], 3)}), and the tree "
                       "grows best-first from the runners-up.")
    return head + (f"From the committed text alone the drafter writes g(0), {len(rec['baseline']) - 1} drafts "
                   f"for positions {s + 1}–{s + len(rec['baseline']) - 1}: "
                   f"{_list([r.q(t) for t in rec['baseline'][1:]], 4)}.")


def _shifted_only(say):
    """Phases 3-5 are about the shifted blocks: a round without any says so instead."""
    def only(r: _Round) -> str:
        if not r.shifted:
            return (f"This round drafts no shifted blocks ({r.mode or 'this mode'}: none, or no rejected suffix was "
                    "kept): only g(0)" + (" and its tree" if r.tree else "") + " go to the target.")
        return say(r)
    return only


@_shifted_only
def _reanchored_blocks(r: _Round) -> str:
    s, shifted = r.s, r.shifted
    first = shifted[0]
    each = [f"g({b['d']}) from the state at {s + b['d'] - 1}, starting with a_{b['d']} = "
            f"{r.q(b['tokens'][0])} at its native position {s + b['d']}" for b in shifted[:3]]
    return ("In the same drafter call, each re-anchored block g(d) continues from the kept state at position "
            "s+d−1 with the target's token a_d: " + "; ".join(each)
            + (f"; and {len(shifted) - 3} more" if len(shifted) > 3 else "") + f" ({len(shifted)} blocks, "
            f"g({first['d']})–g({shifted[-1]['d']})).")


@_shifted_only
def _matching(r: _Round) -> str:
    hits = [f"g({f['d']})'s {r.q(b['tokens'][0])} at {', '.join(map(str, f['sites']))}"
            for f, b in zip(r.fates, r.shifted) if f["sites"]]
    none = [f for f in r.fates if not f["sites"]]
    return ("Matching: each a_d is looked up in g(0) (indices 0–" + f"{len(r.rec['baseline']) - 1}). "
            + (f"{_list(hits)}." if hits else "No a_d occurs in g(0).")
            + (f" {len(none)} blocks match nowhere (no site)." if none else ""))


@_shifted_only
def _site_choice(r: _Round) -> str:
    s, moves = r.s, []
    for f in r.att:
        t = f["attached"][0]
        shift = t - f["d"]
        how = "its own index" if shift == 0 else (f"{-shift} position{'s' if -shift > 1 else ''} earlier"
                                                 if shift < 0 else f"{shift} later")
        moves.append(f"g({f['d']}) to site {t} (its own index, position {s + t})" if shift == 0 else
                     f"g({f['d']}) to site {t} ({how}: position {s + t} instead of {f['native']})")
    gone = [f for f in r.fates if f["fate"] != "attached"]
    return (f"Rule {r.rule or '?'} picks one site per block: " + (_list(moves, 3) if moves else "none attach")
            + "." + (f" {len(gone)} blocks are discarded ("
                     + ", ".join(sorted({records.FATE_SHORT[f['fate']] for f in gone})) + ")." if gone else ""))


def _merged_trie(r: _Round) -> str:
    att = r.att
    srcs = records.node_sources(r.rec)
    shared = sum(1 for x in srcs[1:] if len(x) > 1)
    what = "g(0)'s tree" + (f" and {len(att)} shifted trees" if att else "") if r.tree else \
        f"g(0) and {len(att)} attached block{'s' if len(att) != 1 else ''}"
    return (f"The paths of {what} merge into one trie of {r.n_nodes} nodes: equal prefixes share nodes "
            f"({shared} node{'s' if shared != 1 else ''} proposed by more than one block, dots under them).")


def _verify_pass(r: _Round) -> str:
    deepest = max(int(x) for x in r.rec["trie"]["depths"])
    return (f"One target call scores all {r.n_nodes} nodes at once (positions {r.s}–{r.s + deepest}). Its attention "
            "mask lets each node see the committed text and its own ancestors only, so every branch is scored "
            "as if it were the whole text.")


def _accepting_walk(r: _Round) -> str:
    rec, a = r.rec, r.a
    lens = records.round_lengths(rec)
    acc = [r.q(t) for t in rec.get("new_tokens", [])[:a]]
    words = (f"{lens['baseline']} on g(0) alone"
             + (f", {lens['branches']} through tree branches" if lens["branches"] else "")
             + (f", {lens['shifted']} through shifted blocks" if lens["shifted"] else ""))
    bonus = (f" Then the target's own next token {r.q(rec['bonus'])} is the bonus."
             if lens["bonus"] else " The run's end left no room for a bonus.")
    return (f"From the anchor the target's choice is followed while a child carries it: {a} drafts accepted"
            + (f" ({_list(acc, 5)})" if acc else "") + f", {words}." + bonus)


def _retained(r: _Round) -> str:
    from .plots import retained_path  # the figure draws the same P*

    tokens, pa = retained_path(r.rec)
    rej = tokens[pa + 1:]
    nxt = r.s + r.a + 1
    if not rej:
        return (f"The bonus is the next anchor at position {nxt}. The accepted path ended where its drafts did: "
                "nothing is kept, and the next round drafts g(0) alone.")
    return (f"The bonus is the next anchor at position {nxt}. The path continues past the accepted nodes with "
            f"{len(rej)} rejected drafts ({_list([r.q(t) for t in rej], 4)}); their target states are "
            f"kept (rings), and the next round re-anchors up to {len(rej)} shifted blocks on them.")


# One function a phase, in PHASES' order: phase k's sentences are PHASE_TEXTS[k - 1]'s.
PHASE_TEXTS = (_rejected_suffix, _anchor_and_g0, _reanchored_blocks, _matching, _site_choice, _merged_trie,
               _verify_pass, _accepting_walk, _retained)


def phase_text(rec: dict, prev: dict | None, phase: int, texts: dict, mode: str | None = None,
               rule: str | None = None) -> str:
    """One or two plain sentences on phase `phase` (1-9) of round `rec`, built from its numbers (and the previous
    round's, `prev`, for phase 1); `mode`, `rule`: the run's (tree modes have their own words). Another phase: ""."""
    if not 1 <= phase <= len(PHASE_TEXTS):
        return ""
    return PHASE_TEXTS[phase - 1](_Round(rec, prev, texts, mode, rule))
