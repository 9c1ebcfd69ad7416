"""The glossary (issue 55, item 5): every word the lesson shows has one definition (app/glossary.py), listed on the page
and in docs/teaching.md, titled where it first appears in a caption, and the menus name each mode and rule with its
line (engine/options.py)."""
from __future__ import annotations

import json
import re
from pathlib import Path

from app import glossary, render
from engine.options import MODE_HELP, MODES, RULE_HELP, RULES

ROOT = Path(__file__).resolve().parents[1]
# The words issue 55 found on screen undefined (item 5), besides the mode names
ISSUE_WORDS = ("anchor", "trie", "verify", "target", "drafter", "block-diffusion", "re-anchored", "retained state",
               "s (in s+d−1)", "attention mask", "ancestors", "prefill", "native → site", "tree branches",
               "repeatable budget", "calibration", "auto budget", "×N", "passes")


def test_every_word_of_the_issue_and_every_mode_and_rule_is_defined():
    assert not [w for w in ISSUE_WORDS if w not in glossary.TERMS]
    assert set(MODES) <= set(glossary.TERMS) and set(MODE_HELP) == set(MODES) and set(RULE_HELP) == set(RULES)
    assert all(f"rule {r}" in glossary.TERMS for r in RULES)
    assert all(v.strip() for v in glossary.TERMS.values())


def test_the_doc_lists_the_glossary_as_the_page_does():
    """docs/teaching.md's glossary is app.glossary's, word for word (one home: the doc follows it)."""
    doc = (ROOT / "docs/teaching.md").read_text(encoding="utf-8")
    assert glossary.markdown() in doc
    for term, text in glossary.TERMS.items():   # and the page's panel
        assert render.escape(term) in render.GLOSSARY and render.escape(text) in render.GLOSSARY


def test_mark_titles_each_word_once_between_tags_only():
    html = ("<b>the anchor</b> at s+d−1 and the anchor again; <span title='anchor trie'>x</span> re-anchored "
            "blocks; rule earliest; the mode reanchor, not &lt;trie&gt;")
    out = glossary.mark(html)
    titled = re.findall(r"<abbr class='rx-term' title=\"([^\"]*)\">([^<]*)</abbr>", out)
    words = [w for _, w in titled]
    assert words.count("anchor") == 1 and "s+d−1" in words and "re-anchored" in words and "reanchor" in words
    assert "earliest" in words and "trie" in words
    assert "<span title='anchor trie'>" in out                      # never inside a tag
    assert "&lt;" in out and "<trie>" not in out                     # text stays escaped
    assert re.sub(r"<abbr[^>]*>|</abbr>", "", out) == html.replace("&lt;", "&lt;")
    seen = {"anchor"}
    assert "title=\"anchor:" not in glossary.mark("the anchor", seen)  # titled before in the same caption


def test_a_caption_titles_its_words():
    trace = json.loads((ROOT / "assets/traces/math-speed-reanchor.json").read_text(encoding="utf-8"))
    rec = trace["rounds"][3]
    seen: set[str] = set()
    step = render.phase_html(3, render.phase_text(rec, trace["rounds"][2], 3, trace["token_texts"], "reanchor",
                                                  "earliest"), seen)
    cap = step + render.round_caption(rec, 3, len(trace["rounds"]), seen=seen)
    for word in ("re-anchored", "s+d−1", "anchor", "trie", "native → site"):
        assert re.search(rf"<abbr class='rx-term' title=\"[^\"]+\">{re.escape(word)}</abbr>", cap), word
    assert len(re.findall(r">anchor</abbr>", cap)) == 1


def test_the_menus_say_each_mode_and_rule_in_a_line():
    from app.ui import MODE_CHOICES, RULE_CHOICES

    assert [v for _, v in MODE_CHOICES] == list(MODES) and [v for _, v in RULE_CHOICES] == list(RULES)
    assert all(label == f"{v} · {MODE_HELP[v]}" for label, v in MODE_CHOICES)
    assert all(label == f"{v} · {RULE_HELP[v]}" for label, v in RULE_CHOICES)


def test_the_controls_script_knows_every_word():
    js = glossary.controls_js()
    terms = json.loads(re.search(r"^const RX = (\{.*?\});\n", js).group(1))["TERMS"]
    assert [t for t, *_ in terms] == list(glossary.PATTERNS)
