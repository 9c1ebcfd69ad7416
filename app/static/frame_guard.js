// Runs before Gradio's own scripts (app/early_script.py puts it first in the page's head).
// Gradio 6.31's status tracker times a pending event with a requestAnimationFrame loop that stops only when the
// event ends. The page's first tracker ("Loading...") is removed while still pending, so its loop never stops: an
// idle page drew 60 frames a second for as long as it was open (~7% of a core in headless Chromium). A frame that a
// status tracker asks for while no tracker is shown is not given, which ends such a loop; a shown tracker (an event
// running) keeps its timer.
(() => {
  const frame = window.requestAnimationFrame.bind(window);
  const trackerShown = () => document.querySelector("[data-testid=status-tracker]:not(.hide)") !== null;
  window.requestAnimationFrame = (callback) => {
    if (!trackerShown() && (new Error().stack || "").includes("/statustracker-")) {
      return 0;
    }
    return frame(callback);
  };
})();
