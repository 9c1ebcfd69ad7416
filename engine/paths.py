"""Where the project's files live: every path root is defined here once."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

from .errors import InputError
from .options import EMBEDDED_NAME

REPO = Path(__file__).resolve().parent.parent
ASSETS = REPO / "assets"
DRAFTERS = ASSETS / "drafters"
TRACES = ASSETS / "traces"
PROMPTS = ASSETS / "prompts"
DEFAULT_DRAFTER_DIR = DRAFTERS / "smollm2-135m-dflash-b16"   # the shipped DFlash drafter for the embedded target


def default_drafter(target: str = EMBEDDED_NAME) -> str:
    """What drafter "default" means: the shipped one for the embedded target where it is present, else "random"."""
    present = (DEFAULT_DRAFTER_DIR / "config.json").is_file()
    return str(DEFAULT_DRAFTER_DIR) if target == EMBEDDED_NAME and present else "random"


def shipped_drafters() -> list[Path]:
    """Every drafter folder under assets/drafters (a config.json), the default one first."""
    found = sorted(d for d in DRAFTERS.glob("*") if (d / "config.json").is_file()) if DRAFTERS.is_dir() else []
    return sorted(found, key=lambda d: d != DEFAULT_DRAFTER_DIR)


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


# -- files the CLI is about to write: checked before any work (a failure after an hour's run loses it) --------
NAME_MAX = 255  # bytes of one file name on Linux file systems


def check_writable_dir(folder: Path, field: str) -> None:
    """Refuse (InputError naming `field`) a folder no file can be written in: read-only, another user's, on a
    read-only file system, /proc. Probed by creating and removing a file, which is what every cause fails."""
    try:
        fd, probe = tempfile.mkstemp(prefix=".write-check-", dir=folder)
    except OSError as e:
        raise InputError(field, f"cannot write in {folder}: {e.strerror or e}") from None
    os.close(fd)
    os.unlink(probe)


def check_output_file(path, field: str) -> Path:
    """A file about to be written whole (through NAME.tmp, then renamed): refused now, naming `field`, when it
    is a folder, its name is too long, its folder is missing or not writable, or it is read-only."""
    p = Path(path)
    size = len(p.name.encode("utf-8", "surrogateescape")) + len(".tmp")
    if size > NAME_MAX:  # first: stat() of such a name fails
        raise InputError(field, f"the file name is {size - 4} bytes, over the {NAME_MAX - 4} a file may have here")
    if p.is_dir():
        raise InputError(field, f"{p} is a folder; give a file name")
    folder = p.parent
    if not folder.is_dir():
        raise InputError(field, f"there is no folder {folder}")
    check_writable_dir(folder, field)
    if p.exists() and not os.access(p, os.W_OK):
        raise InputError(field, f"{p} is read-only")
    return p
