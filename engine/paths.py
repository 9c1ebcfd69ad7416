"""Where the project's files live: every path root is defined here once."""
from __future__ import annotations

from pathlib import Path

from .options import EMBEDDED_NAME

REPO = Path(__file__).resolve().parent.parent
ASSETS = REPO / "assets"
DRAFTERS = ASSETS / "drafters"
TRACES = ASSETS / "traces"
PROMPTS = ASSETS / "prompts"
# the shipped drafters for the embedded target, the first one present is the default
DEFAULT_DRAFTER_DIRS = [DRAFTERS / "smollm2-135m-dflash-b16", DRAFTERS / "smollm2-135m-dflash-b8"]


def default_drafter(target: str = EMBEDDED_NAME) -> str:
    """What drafter "default" means: the first shipped one present for the embedded target, else "random"."""
    found = [d for d in DEFAULT_DRAFTER_DIRS if (d / "config.json").is_file()]
    return str(found[0]) if target == EMBEDDED_NAME and found else "random"


def shipped_drafters() -> list[Path]:
    """Every drafter folder under assets/drafters (a config.json), the default ones first."""
    found = sorted(d for d in DRAFTERS.glob("*") if (d / "config.json").is_file()) if DRAFTERS.is_dir() else []
    return [d for d in DEFAULT_DRAFTER_DIRS if d in found] + [d for d in found if d not in DEFAULT_DRAFTER_DIRS]


def package_dir(module: str) -> Path | None:
    """An installed package's folder without importing it (importing some pulls in heavy modules)."""
    import importlib.util

    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])
