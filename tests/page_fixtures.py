"""The projector page (Chromium at 1280x720 on the tiny app, conftest.tiny_app) that the round inspector, lesson,
lesson-fit and researcher tests share: its fixtures (module-scoped app, a fresh page per test) and the helpers that
read it. Not a test module: importing it gives each module its own fixtures."""
from __future__ import annotations

import pytest

from app_fixtures import REPO, chromium_or_skip

EXAMPLES = sorted((REPO / "assets" / "traces").glob("*.json"))
VIEW = {"width": 1280, "height": 720}


@pytest.fixture(scope="module")
def app(tiny_app):
    chromium_or_skip()
    return tiny_app


@pytest.fixture
def page(app, browser):
    """A fresh page (its own session) per test: each starts from what a visitor sees, whatever ran before."""
    pg = browser.new_page(viewport=VIEW)
    pg.goto(app.url)
    pg.wait_for_function("() => (document.querySelector('#rx-model-status')?.innerText || '').includes('ready')",
                         timeout=120000)
    # the page's load event answered (it shows the first example trace): a test's first step acts on the page a
    # visitor sees, not on one still mounting (a fresh page can say "ready" in its first paint)
    pg.wait_for_function("ex => { const m = document.querySelector('#rx-metrics');"
                         " return m && (!ex || m.innerText.includes('example trace')); }", arg=bool(EXAMPLES),
                         timeout=60000)
    yield pg
    pg.close()


def caption(pg) -> str:
    return pg.inner_text("#rx-caption")


def in_view(pg, selector: str) -> bool:
    """The element's top lies within the viewport (a person sees it without scrolling)."""
    return pg.evaluate("""s => { const r = document.querySelector(s).getBoundingClientRect();
                                 return r.top >= 0 && r.top < window.innerHeight - 40; }""", selector)


def run(pg, prompt: str, max_new: int = 12) -> None:
    pg.fill("#rx-prompt textarea", prompt)
    pg.fill("#rx-max-new input", str(max_new))
    pg.click("#rx-run")
    pg.wait_for_function("() => /\\b(done|stopped)\\b/.test(document.querySelector('#rx-metrics')?.innerText || '')",
                         timeout=120000)


def wait_figure(pg, r: int | None = None) -> None:
    """The round figure is drawn (for round r when given): its grid names g(0) and its title the round. A timeout
    names the figure's title and the caption shown instead."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    try:
        pg.wait_for_function("""r => { const t = document.querySelector('#rx-round-plot [data-shown] .gtitle')?.textContent || '';
            return [...document.querySelectorAll('#rx-round-plot [data-shown] .ytick text')].some(e => e.textContent === 'g(0)')
                && (r === null || t.startsWith('round ' + r + ' ')); }""", arg=r, timeout=60000)
    except PlaywrightTimeout:
        title = pg.evaluate("() => document.querySelector('#rx-round-plot [data-shown] .gtitle')?.textContent")
        raise AssertionError(f"no figure of round {r} within 60 s: the figure's title {title!r}, "
                             f"the caption {caption(pg)!r}") from None


def example_box(pg) -> str:
    return pg.input_value("#rx-example-trace input")
