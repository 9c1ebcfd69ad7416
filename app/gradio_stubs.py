"""A faster `import gradio`: Gradio's stub writer skipped.

Each time gradio is imported, its ComponentMeta re-derives the .pyi stub of every component class (~40) from the
class's source: an ast.parse of the component's module and a Jinja compile per class
(gradio.component_meta.create_or_modify_pyi), for the editors of people who write components. It is ~40% of the
import (2.6 -> 1.6 s of a core here), paid by every process that serves the app. The app defines no component, so
it skips the stubs: a one-shot import hook swaps that function for a no-op as gradio.component_meta loads, before
any component class is made. Where gradio was imported first, or a later Gradio has no such function, nothing
changes but the time.
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys

MODULE = "gradio.component_meta"


def _no_stub(*_args, **_kwargs) -> None:
    """The app writes no component stubs (see the module's docstring)."""


class _SkipStubs(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != MODULE:
            return None
        sys.meta_path.remove(self)   # one module, once
        spec = importlib.machinery.PathFinder.find_spec(name, path, target)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module) -> None:
            run(module)
            if hasattr(module, "create_or_modify_pyi"):
                module.create_or_modify_pyi = _no_stub
        spec.loader.exec_module = exec_module
        return spec


def skip_stub_writing() -> None:
    """Install the hook, unless gradio's component_meta is loaded already or the hook is in place."""
    if MODULE not in sys.modules and not any(isinstance(f, _SkipStubs) for f in sys.meta_path):
        sys.meta_path.insert(0, _SkipStubs())
