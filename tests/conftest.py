import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing may download at test time
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# every model process a test starts (apps, CLI runs) computes on one thread, as this one does: on 2 cores beside
# Chromium and pytest, two OpenMP threads spin-wait for each other's core (a verify of 8 nodes of the embedded
# model took 2.8 s instead of 0.1 s at a load of 5)
os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)  # tiny models: threads only add contention on a 2-core machine


# The files that take longest (the durations summary below), started first: the README's test command runs two
# pytest-xdist workers, each taking a whole file at a time (--dist loadfile), so none of these may start last
# and leave one worker alone at the end. Tests do not depend on this order.
SLOW_FILES = ("test_app_lesson.py", "test_app_round_inspector.py", "test_app_hostile.py", "test_sweep.py",
              "test_race_browser.py", "test_example_traces.py", "test_lossless.py", "test_app_client.py",
              "test_app_network.py", "test_app_long_run.py", "test_lesson_fit.py", "test_shipped_drafters.py",
              "test_sampling_t1.py", "test_app_browser.py", "test_page_browser.py", "test_variants.py",
              "test_app_researcher.py", "test_model_errors.py", "test_app_trace_bounds.py", "test_static.py")


def pytest_collection_modifyitems(items) -> None:
    rank = {name: i for i, name in enumerate(SLOW_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))   # stable: each file keeps its own order


def pytest_configure(config) -> None:
    """The slowest tests in every run's summary (CI's log included), unless --durations says otherwise: the
    suite's time is a budget, and this is where it goes. Files in SLOW_FILES' order under pytest-xdist."""
    if hasattr(config.option, "loadscopereorder"):   # else xdist sorts the files by their number of tests
        config.option.loadscopereorder = False
    if config.option.durations is None:
        config.option.durations = 25


@pytest.fixture(scope="session")
def browser_profile(tmp_path_factory):
    """One Chromium profile folder per pytest worker, which every browser-test module's browser reuses in turn:
    its disk cache keeps the page's scripts and their compiled code, so a page load after the first costs
    Chromium ~2 s of a core instead of ~4 s (a returning visitor's load, as a person's browser does)."""
    return tmp_path_factory.mktemp("chromium-profile")


class CachedBrowser:
    """The module's Chromium as tests use it (new_page, new_context), over a persistent context so that pages
    share the profile's disk cache. A page still has its own Gradio session; contexts made with new_context
    (offline ones) are fresh and share nothing."""

    def __init__(self, context) -> None:
        self.context = context

    def new_page(self, viewport: dict | None = None):
        pg = self.context.new_page()
        if viewport:
            pg.set_viewport_size(viewport)
        return pg

    def new_context(self, **options):
        return self.context.browser.new_context(**options)


@pytest.fixture(scope="module")
def browser(browser_profile):
    """The system's Chromium under Playwright, one per browser-test module, on the worker's profile (skips or
    fails as app_fixtures.chromium_or_skip says when it is missing)."""
    from app_fixtures import CHROMIUM_ARGS, chromium_or_skip

    playwright_api = pytest.importorskip("playwright.sync_api")
    path = chromium_or_skip()
    with playwright_api.sync_playwright() as p:
        context = p.chromium.launch_persistent_context(browser_profile, executable_path=path, args=CHROMIUM_ARGS)
        yield CachedBrowser(context)
        context.close()


@pytest.fixture(scope="session")
def tiny_app(tmp_path_factory):
    """`python -m app` serving the tiny Qwen3 target and drafter, launched once (per pytest-xdist worker) for every
    module that needs no other settings (the browser, round inspector, lesson, trace bounds, client and concurrency
    tests): a launch cost ~5 s of imports, a model load and its profiles. Each test talks to it through its own page
    or client, i.e. its own session. Its context is 4,096 tokens (the model's 512 raised: RoPE positions need no
    weights) for the browser test's stoppable 2,000-token run; `.dirs`: its target and drafter folders."""
    from app_fixtures import launched_tiny_app

    yield from launched_tiny_app(tmp_path_factory, context=4096)
