"""The page's JavaScript and CSS, files under app/static/ read once at import (no CDN, nothing fetched: the
page works offline and the race's HTML export inlines the same files). Python values reach them as one JSON
block: `RX` for the scripts (with_constants), CSS custom properties for the styles (css_vars)."""
from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path

STATIC = Path(__file__).resolve().parent / "static"
_CSS_NAME = re.compile(r"[a-z][a-z0-9-]*")


@cache
def read(name: str) -> str:
    """A file of app/static/ (read once)."""
    return (STATIC / name).read_text(encoding="utf-8")


def with_constants(constants: dict, *names: str) -> str:
    """The scripts `names` (app/static/, in order) after `const RX = {...};`: the Python values they read."""
    return "const RX = " + json.dumps(constants, sort_keys=True) + ";\n" + "".join(read(n) for n in names)


def css_vars(values: dict[str, str]) -> str:
    """`values` as CSS custom properties on the page's root (--name: value), for the styles of app/static/."""
    for name, value in values.items():
        if not _CSS_NAME.fullmatch(name) or any(c in value for c in ";{}<>\\"):
            raise ValueError(f"CSS custom property {name!r}: {value!r} is not a plain name and value")
    return ":root{" + ";".join(f"--{name}:{value}" for name, value in values.items()) + "}\n"
