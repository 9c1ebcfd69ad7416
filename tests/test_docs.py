"""The repository explains itself: every file that code, tests and docs name is in the repository, every link of
the README and docs/ resolves (anchors included), every CLI flag and trace field is documented, the reference docs
carry no dated lab-notebook episodes, and docs/algorithm.md's worked round is what the shipped trace records."""
from __future__ import annotations

import argparse
import json
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# a path into the repository with a file extension (module.attr references and globs are not files)
FILE_REF = re.compile(r"(?<![\w/.])((?:docs|engine|app|tests|assets|\.ci)/[\w./-]*\.(?:md|py|sh|json|jsonl|txt|png))\b")
NAMED_DOC = re.compile(r"\b(ALGORITHM\.md|DFLASH\.md|see the re" r"port)\b")  # split: not a hit itself
LINK_ANCHOR = re.compile(r"\]\(([^)#\s]*)(?:#([^)\s]*))?\)")
NOTEBOOK = ROOT / "docs/lab/notebook.md"   # the dated episodes; every other doc is reference


def docs() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def tracked() -> list[Path]:
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout.split()
    return [ROOT / p for p in out if p.endswith((".py", ".md", ".sh", ".txt")) or p == ".ci/run"]


def test_every_named_file_is_in_the_repository():
    files = tracked()
    assert len(files) > 50, "git listed too few files: the test would prove nothing"
    missing, vague = [], []
    for f in files:
        text = f.read_text(encoding="utf-8", errors="replace")
        missing += [f"{f.relative_to(ROOT)}: {ref}" for ref in FILE_REF.findall(text)
                    if not (ROOT / ref).exists()]
        vague += [f"{f.relative_to(ROOT)}: {m}" for m in NAMED_DOC.findall(text)]
    assert not missing, f"files named but not in the repository: {missing}"
    assert not vague, f"references to documents outside the repository: {vague}"


def anchors(doc: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation but '-' and '_' dropped, spaces to '-'."""
    text = re.sub(r"```.*?```", "", doc.read_text(encoding="utf-8"), flags=re.S)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in re.findall(r"^#+ (.+)$", text, re.M)}


def test_every_doc_link_resolves():
    """Files and the headings their anchors name (the README's figures cite sections of docs/results.md)."""
    bad, checked = [], 0
    for doc in docs():
        for link, anchor in LINK_ANCHOR.findall(doc.read_text(encoding="utf-8")):
            if "://" in link or link.startswith("mailto:"):
                continue
            target = (doc.parent / link).resolve() if link else doc
            if not target.exists():
                bad.append(f"{doc.relative_to(ROOT)} -> {link}")
            elif anchor and target.suffix == ".md":
                checked += 1
                if anchor not in anchors(target):
                    bad.append(f"{doc.relative_to(ROOT)} -> {link}#{anchor}")
    assert checked > 5, "too few anchors checked: the test would prove nothing"
    assert not bad, f"broken links: {bad}"


def test_readme_is_short():
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= 200


def test_the_worked_round_is_the_traces():
    """docs/algorithm.md and the README walk round 3 of the math example (the round the app opens on): anchor `,`
    at 68 after round 2's extra `·station`, g(1)..g(4) each attached one index before their native one, 8 accepted
    drafts through g(2)-g(4) and the bonus ` and`, where the baseline alone would have committed 4 tokens."""
    from app.records import most_instructive

    doc = (ROOT / "docs/algorithm.md").read_text(encoding="utf-8")
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "assets/traces/math-speed-reanchor.json" in doc and "math round 3" in doc and "--round 3" in doc
    trace = json.loads((ROOT / "assets/traces/math-speed-reanchor.json").read_text(encoding="utf-8"))
    cfg = trace["config"]
    assert (cfg["mode"], cfg["rule"], cfg["max_new_tokens"], cfg["temperature"], cfg["seed"]) == \
        ("reanchor", "earliest", 80, 0.0, 0)
    assert f"--drafter {cfg['drafter']}" in doc and f"{len(trace['rounds'])} rounds, tau {trace['stats']['tau']:.2f}" in doc
    assert most_instructive(trace["rounds"])[0] == 3          # the round the app opens the example on
    r, word = trace["rounds"][3], lambda i: trace["token_texts"][str(i)].replace(" ", "·").replace("\n", "⏎")
    text = lambda ids: " ".join(word(i) for i in ids)
    # the facts as the doc writes them, each read from the trace
    facts = [f"Round 3's anchor is `{word(r['anchor'])}` at s = {r['anchor_pos']}",
             f"drafted\n  `{text(r['baseline'])}`",
             f"Round 3's trie has {len(r['trie']['tokens'])} nodes, at depths 0..{max(r['trie']['depths'])}",
             f"over all {len(r['trie']['tokens'])} nodes, each at position {r['anchor_pos']} + its depth",
             f"a = {r['accepted']} accepted drafts",
             f"{r['accepted'] + 1} tokens committed (`{text(r['new_tokens'])}`)",
             f"the next anchor is `{word(r['bonus'])}` at s' = {r['anchor_pos'] + len(r['new_tokens'])}",
             f"(`retained` = {r['retained']})"]
    for d, sites, chosen in [(s["d"], s["sites"], s["chosen"]) for s in r["shifted"] if s["chosen"] is not None]:
        facts.append(f"| g({d}) | `{word(r['shifted'][d - 1]['tokens'][0])}` | {r['anchor_pos'] + d} | "
                     f"{', '.join(map(str, sites))} | {chosen} |")
    T, paths = r["trie"], r["paths"]
    for k, n in enumerate(r["accepted_nodes"]):
        facts.append(f"| {n} | {T['depths'][n]} | `{word(T['tokens'][n])}`")
        assert T["depths"][n] == k
    missing = [f for f in facts if f not in doc]
    assert not missing, f"docs/algorithm.md does not state what the trace records: {missing}"
    # the shift: g(1)..g(4) each join one index before their native d; the accepted drafts past depth 3 are theirs
    assert [s["chosen"] for s in r["shifted"][:4]] == [0, 1, 2, 3]
    sources = [{paths[p]["source"] for p in T["provenance"][n]} for n in r["accepted_nodes"]]
    assert sources[4] == {2, 3, 4} and sources[6] == {3, 4}
    # the baseline alone: its first disagreement with the target
    alone = next(k for k in range(1, r["block_size"]) if r["baseline"][k] != r["target_top1"][k - 1]) - 1
    assert f"would have committed {alone + 1} (`{text(r['baseline'][1:alone + 1])}` and the bonus " \
           f"`{word(r['target_top1'][alone])}`)" in doc
    assert f"shifted gain**: {r['accepted'] - alone} tokens" in doc
    prev = trace["rounds"][2]
    assert (prev["retained"], prev["anchor_pos"], text(prev["new_tokens"])) == (14, 66, "·train ,")
    assert f"(`retained` = {prev['retained']})" in doc and f"Round 2 had anchor `{word(prev['anchor'])}` at s = 66" in doc
    a_d = " ".join(word(s["tokens"][0]) for s in r["shifted"][:4])
    assert a_d == ", ·we ·need ·to"
    assert "That is round 3 of `assets/traces/math-speed-reanchor.json`" in readme
    assert f"{r['accepted']} accepted drafts + the bonus = {r['accepted'] + 1} tokens" in readme


class _Parsed(Exception):
    """Raised in place of parsing: carries the parser a program built, with every flag it would accept."""


@pytest.fixture(scope="module")
def parsers(request) -> dict[str, argparse.ArgumentParser]:
    """The real parsers of `python -m engine` (one per subcommand) and `python -m app`, caught as their main
    functions hand them their arguments: no hand list of subcommands or flags."""
    import app.__main__ as app_main
    import engine.__main__ as engine_main

    def caught(build) -> argparse.ArgumentParser:
        mp = pytest.MonkeyPatch()
        mp.setattr(argparse.ArgumentParser, "parse_args", lambda self, *a, **k: (_ for _ in ()).throw(_Parsed(self)))
        try:
            build()
        except _Parsed as e:
            return e.args[0]
        finally:
            mp.undo()
        raise AssertionError(f"{build} parsed no arguments")

    def subcommands(argv: list[str]) -> dict[str, argparse.ArgumentParser]:
        engine = caught(lambda: engine_main.main(argv))
        return next(a for a in engine._actions if isinstance(a, argparse._SubParsersAction)).choices

    # each subcommand as its own command line builds it (a CLI may add a command's flags only when it is named)
    return {**{name: subcommands([name])[name] for name in subcommands([])},
            "app": caught(lambda: app_main.parse_args([]))}


def flags(p: argparse.ArgumentParser) -> set[str]:
    return {o for a in p._actions for o in a.option_strings if o.startswith("--") and o != "--help"}


def named(word: str, text: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(word)}(?![\w-])", text) is not None


# where each program's flags are documented; the flags `generate` shares (models, decoding) live in cli.md once
FLAG_DOCS = {"generate": "docs/cli.md", "check-trace": "docs/cli.md", "explain": "docs/cli.md",
             "bench": "docs/benchmark.md", "train": "docs/training.md", "app": "docs/app.md"}


def test_every_cli_flag_is_documented(parsers):
    assert {"generate", "bench", "train", "check-trace", "explain", "app"} <= set(parsers)
    assert len(flags(parsers["train"])) > 40 and "--round" in flags(parsers["explain"])  # the parsers were caught whole
    # a flag defined as generate's is (the model and decoding flags bench shares) is documented once, in cli.md
    same = lambda a: (a.dest, a.default, a.help, a.type, a.choices)
    gen = {o: same(a) for a in parsers["generate"]._actions for o in a.option_strings}
    cli = (ROOT / "docs/cli.md").read_text(encoding="utf-8")
    missing = []
    for prog, p in parsers.items():
        doc = FLAG_DOCS.get(prog)
        assert doc, f"`{prog}` is a new command: name the doc of its flags in FLAG_DOCS"
        text = (ROOT / doc).read_text(encoding="utf-8")
        missing += [f"{prog} {f} (in {doc})" for a in p._actions for f in a.option_strings
                    if f.startswith("--") and f != "--help" and not named(f, text)
                    and not (gen.get(f) == same(a) and named(f, cli))]
    assert not missing, f"flags no doc names: {missing}"


def trace_fields() -> set[str]:
    """Every key the shipped traces hold (round records and their nested records included), and every config key
    and stage the schema knows."""
    from engine.trace import CONFIG_TYPES, STAGES

    keys: set[str] = set()

    def walk(o, parent: str) -> None:
        if isinstance(o, dict):
            for k, v in o.items():
                if parent != "token_texts":   # keys there are token ids
                    keys.add(k)
                    walk(v, k)
        elif isinstance(o, list):
            for v in o:
                walk(v, parent)

    traces = sorted((ROOT / "assets/traces").glob("*.json"))
    assert traces, "no shipped traces"
    for f in traces:
        walk(json.loads(f.read_text(encoding="utf-8")), "")
    return keys | set(CONFIG_TYPES) | set(STAGES)


def test_every_trace_field_is_documented():
    fields = trace_fields()
    assert {"stages_ms", "draft_head_dtype", "provenance", "backbone", "target_top1"} <= fields
    doc = (ROOT / "docs/trace-format.md").read_text(encoding="utf-8")
    missing = sorted(k for k in fields if not named(k, doc))
    assert not missing, f"trace fields docs/trace-format.md does not name: {missing}"


# what a dated lab-notebook episode carries and a reference doc does not
EPISODE = re.compile(r"\bstop \d+\b|\bload average|\bload \d|\bthe lead\b|\banother engineer|\bengineers'|"
                     r"\b\d{1,2}:\d\d(?:-\d{1,2}:\d\d)? UTC\b|\bthis (?:session|morning|evening)\b|"
                     r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,12}\b", re.I)


def test_reference_docs_carry_no_dated_episodes():
    refs = [d for d in docs() if d != NOTEBOOK and d.parent != NOTEBOOK.parent]
    assert len(refs) > 10
    found = [f"{d.relative_to(ROOT)}:{i}: {m.group(0)!r}" for d in refs
             for i, line in enumerate(d.read_text(encoding="utf-8").splitlines(), 1) for m in EPISODE.finditer(line)]
    assert not found, f"dated episodes in reference docs (they belong in {NOTEBOOK.relative_to(ROOT)}): {found}"
    assert EPISODE.search((ROOT / "docs/lab/notebook.md").read_text(encoding="utf-8")), "the markers match nothing"


def test_the_lab_notebook_is_newest_first_and_linked_once():
    text = NOTEBOOK.read_text(encoding="utf-8")
    days = re.findall(r"^## (\d{4}-\d\d-\d\d)\b", text, re.M)
    assert len(days) >= 5 and days == sorted(days, reverse=True) and len(set(days)) == len(days), days
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert readme.count("(docs/lab/notebook.md)") == 1


def section(doc: Path, anchor: str) -> str:
    """The text under the heading `anchor` names, up to the next heading of its level or above."""
    lines, out, level = doc.read_text(encoding="utf-8").splitlines(), [], 0
    for line in lines:
        m = re.match(r"^(#+) (.+)$", line)
        if m and level and len(m.group(1)) <= level:
            break
        if m and not level and re.sub(r"[^\w\- ]", "", m.group(2).strip().lower()).replace(" ", "-") == anchor:
            level = len(m.group(1))
        if level:
            out.append(line)
    return "\n".join(out)


def test_every_readme_figure_is_in_the_section_it_cites():
    """The README's results table: each row's tau and speed figures stand in a section its source column links."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    table = [line for line in readme.split("## Latest results at a glance")[1].splitlines() if line.startswith("| `")]
    header = next(line for line in readme.splitlines() if line.startswith("| mode | drafter |"))
    cols = [c.strip() for c in header.strip("|").split("|")]
    tau, speed = cols.index("tau"), cols.index("speed over `ar`")
    assert len(table) >= 6
    missing = []
    for row in table:
        cells = [c.strip() for c in row.strip("|").split("|")]
        cited = "\n".join(section(ROOT / link, anchor) for link, anchor in LINK_ANCHOR.findall(row) if anchor)
        assert cited, f"a row cites no section: {row}"
        missing += [f"{cells[0]} {cells[1]}: {n}" for n in re.findall(r"\d+\.\d+x?", cells[tau] + " " + cells[speed])
                    if not named(n, cited)]
    assert not missing, f"README figures not in the sections they cite: {missing}"
