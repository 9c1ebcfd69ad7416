"""The palette: one colour per token source (the baseline g(0), each shifted block g(d), the bonus) and the figures'
marks and font. The figures (app.plots), the text view and the race (app.render, app.race_view: PALETTE_VARS, the
CSS custom properties text.css and race.css read) all take their colours from here, so a token is one colour
everywhere."""
from __future__ import annotations

BASE_COLOR = "#3b6fd4"
SHARED_COLOR = "#7b5fc7"
BONUS_COLOR = "#e0a100"
GREY = "#c9ccd1"
ACCEPT_COLOR = "#1a9e50"
# One colour per shifted offset d (cycled): distinct from the baseline blue.
D_COLORS = ["#e4572e", "#17a398", "#c44fa0", "#8a6d1d", "#f08c2b", "#4f9d2d", "#d1495b", "#2e86ab"]
EXT_FILL = "rgba(240,180,0,0.10)"
# The round in view, on the timeline: framed in the near-black that frames its tokens in the text view
# (render.CSS span.cur; plots.view_frame draws it).
VIEW_COLOR = "#111"
VIEW_FILL = "rgba(17,17,17,0.10)"
FONT = dict(family="system-ui, -apple-system, 'Segoe UI', Roboto, 'DejaVu Sans', sans-serif", size=11)


def d_color(d: int) -> str:
    return D_COLORS[(int(d) - 1) % len(D_COLORS)]


def category_color(cat: str) -> str:
    if cat == "baseline":
        return BASE_COLOR
    if cat == "shared":
        return SHARED_COLOR
    if cat == "bonus":
        return BONUS_COLOR
    if cat.startswith("d"):
        return d_color(int(cat[1:]))
    return GREY


# the round figure's strip: the previous round's rejected drafts, what the target said, the retained suffix
REJECT_COLOR = "#8d4b4b"
TARGET_COLOR = "#2f2f2f"
RETAIN_COLOR = "#d1495b"


# The token backgrounds of the text view and the race's lanes (text.css, race.css read them as var(--name)):
# each source's palette colour, translucent
PALETTE_VARS = {"rx-b-bg": BASE_COLOR + "22", "rx-x-bg": BONUS_COLOR + "55",
                **{f"rx-s{i}-bg": c + "44" for i, c in enumerate(D_COLORS)},
                # the race's lanes: a deeper shade, underlined in the block's own colour
                **{f"rx-s{i}-lane-bg": c + "66" for i, c in enumerate(D_COLORS)},
                **{f"rx-s{i}-fg": c for i, c in enumerate(D_COLORS)}}
