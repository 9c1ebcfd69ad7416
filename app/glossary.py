"""The words the page uses, each defined once: the page's glossary panel, the hover titles on their first appearance
in a caption, a table or a control, and docs/teaching.md's glossary (tests/test_glossary.py holds the doc to it).
The modes' and rules' one-liners live with the modes (engine.options.MODE_HELP, RULE_HELP)."""
from __future__ import annotations

import html
import re

from engine.options import MODE_HELP, RULE_HELP

from . import assets

# term -> its definition (plain text), in the order the glossary lists them
TERMS: dict[str, str] = {
    "target": "the large model whose text is kept: speculative decoding commits exactly the tokens it would write "
              "alone.",
    "drafter": "the small model that proposes tokens (drafts) for the target to check.",
    "block-diffusion": "a drafter that writes a whole block of tokens in one call (DFlash), not one token at a time.",
    "prefill": "the target's first pass over the prompt; it writes the first token, before round 0.",
    "anchor": "the last committed token (the previous round's bonus) at position s: every draft of the round "
              "continues from it.",
    "s (in s+d−1)": "the anchor's position; s+d−1 is the position of the rejected draft whose kept state g(d) starts "
                    "from.",
    "τ (tau)": "tokens committed per round, on average: accepted drafts plus the bonus. Higher τ, fewer target calls "
               "for the same text.",
    "baseline-alone": "the drafts the round would have accepted from g(0) alone (plain DFlash), as the accepted path "
                      "and g(0) agree from the anchor on.",
    "shifted gain": "drafts accepted beyond the baseline-alone length, through a shifted block's tokens.",
    "retained state": "the target's states at the previous round's rejected drafts, kept (the rings ◯): the next "
                      "round drafts its shifted blocks from them.",
    "re-anchored": "a shifted block g(d), drafted again from a kept state with the target's own token a_d as its "
                   "first token.",
    "a_d": "the target's own token after the d-th rejected draft of the previous round: g(d)'s first token.",
    "native position": "where g(d) was drafted: position anchor + d, right after the rejected draft whose state it "
                       "starts from (▼ on its row; native index d in g(0)).",
    "site": "a baseline index t where g(0)[t] equals g(d)'s first token a_d; attaching there puts g(d) after "
            "g(0)[0..t]. The rule picks one site (earliest, latest, random, fixed = its native index d; all: every "
            "site).",
    "native → site": "where a shifted block was drafted (its native position, anchor + d) and where the rule "
                     "attached it (the site's position, anchor + t).",
    "trie": "a prefix tree: the round's drafted paths merged, equal prefixes sharing nodes; the target checks it "
            "all in one pass.",
    "ancestors": "the nodes on the path from the anchor to a node: its prefix in the trie.",
    "attention mask": "which tokens each trie node may look at during verify: the committed text and its own "
                      "ancestors, never a sibling branch.",
    "verify": "one target call that scores every node of the trie at once.",
    "tree branches": "drafts accepted through a tree's other branches (the drafter's runners-up), beyond g(0)'s own "
                     "top-1 chain.",
    "bonus": "the target's token after the last accepted draft; it is committed too and anchors the next round.",
    "g(14)+1": "at a trie branch's end: the branch's first block, g(14), and 1 more block whose path ends there too.",
    "✂": "an attached block cut short: the node budget or the run's last position left room for part of it.",
    "auto budget": "the cost model picks, round by round, the shifted blocks and trie nodes that pay for their time "
                   "on this hardware.",
    "calibration": "how the auto budget weighs its costs: online (rescaled by each round's measured time) or fixed "
                   "(the machine's profile as measured).",
    "repeatable budget": "the auto budget with fixed calibration: the same prompt takes the same rounds on every run "
                         "(a rehearsed demo repeats).",
    "passes": "target forward passes: the race's clock that no hardware changes (one a round, and the prefill).",
    "×N": "a race lane's speed over plain decoding (the target alone) in the same precision.",
} | {m: f"mode: {h}." for m, h in MODE_HELP.items()} | {f"rule {r}": f"{h}." for r, h in RULE_HELP.items()}

# How a term shows on the page where its name differs (a regular expression); the term itself otherwise
APPEARS: dict[str, str] = {
    "s (in s+d−1)": r"s\+d−1",
    "τ (tau)": r"τ",
    "retained state": r"retained|kept states?|keep their target states",
    "re-anchored": r"re-anchor(?:ed|s)?",
    "native → site": r"native → site",
    "passes": r"passes",
    "×N": r"×N",
    "✂": r"✂",
    "g(14)+1": r"g\(\d+\)\+\d+",
} | {f"rule {r}": rf"(?<=rule ){re.escape(r)}\b" for r in RULE_HELP}


def _pattern(term: str) -> re.Pattern:
    word = APPEARS.get(term)
    if word is None:
        word = re.escape(term)
        if term in MODE_HELP:  # a mode by its exact name, not "re-anchored" for reanchor nor "ar" in a word
            return re.compile(rf"(?<![\w-]){word}(?![\w-])")
    return re.compile(rf"(?<![\w]){word}(?![\w])" if word[0].isalnum() else word, re.I if term not in MODE_HELP
                      else 0)


PATTERNS = {t: _pattern(t) for t in sorted(TERMS, key=len, reverse=True)}
_TAG = re.compile(r"(<[^>]*>)")


def mark(markup: str, seen: set[str] | None = None) -> str:
    """HTML with the first appearance of each term (not in `seen`; it is added) wrapped in <abbr title=definition>:
    text between tags only, never inside a tag or an abbr already made. `markup` is escaped HTML."""
    seen = set() if seen is None else seen
    parts = [("tag" if i % 2 else "text", p) for i, p in enumerate(_TAG.split(markup)) if p]
    for term, pat in PATTERNS.items():
        if term in seen:
            continue
        for k, (kind, text) in enumerate(parts):
            m = pat.search(html.unescape(text)) if kind == "text" else None
            if not m:
                continue
            raw = html.unescape(text)
            title = html.escape(f"{term}: {TERMS[term]}", quote=True)
            parts[k:k + 1] = [("text", html.escape(raw[:m.start()], quote=False)),
                              ("tag", f"<abbr class='rx-term' title=\"{title}\">"),
                              ("done", html.escape(m.group(0), quote=False)), ("tag", "</abbr>"),
                              ("text", html.escape(raw[m.end():], quote=False))]
            seen.add(term)
            break
    return "".join(p for _, p in parts)


def panel() -> str:
    """The glossary panel under the figure legend (HTML)."""
    return ("<details class='rx-glossary' open><summary><b>Words on this page</b> (hover a dotted word anywhere "
            "for its line here)</summary><dl class='rx-gloss'>"
            + "".join(f"<dt>{html.escape(k)}</dt><dd>{html.escape(v)}</dd>" for k, v in TERMS.items())
            + "</dl></details>")


def markdown() -> str:
    """The glossary as docs/teaching.md lists it."""
    return "\n".join(f"- **{k}**: {v}" for k, v in TERMS.items())


def controls_js() -> str:
    """Browser code: a title (the definition) on the first label, info line, button or table head of the page's
    controls that names each term, and a dotted underline under a short one (the controls are Gradio's: their words
    are titled here, once they are in the page, never rewritten)."""
    terms = [[t, p.pattern, "i" if p.flags & re.I else "", TERMS[t]] for t, p in PATTERNS.items()]
    return assets.with_constants({"TERMS": terms}, "glossary.js")
