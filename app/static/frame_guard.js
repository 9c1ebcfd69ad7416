// Runs before Gradio's own scripts (app/early_script.py puts it first in the page's head).
// Gradio 6.31's status tracker times a pending event with a requestAnimationFrame loop that stops only when the
// event ends. The page's first tracker ("Loading...") is removed while still pending, so its loop never stops: an
// idle page drew 60 frames a second for as long as it was open (~7% of a core in headless Chromium). A status
// tracker's frame asked for from within its own last frame (a loop going on) is not given while no tracker is
// shown, which ends such a loop; a tracker's first frame (a scroll to an output, one after a status message) is
// always given, and a shown tracker (an event running) keeps its timer.
(() => {
  const frame = window.requestAnimationFrame.bind(window);
  const trackerShown = () => document.querySelector("[data-testid=status-tracker]:not(.hide)") !== null;
  let inTrackerFrame = false;
  window.requestAnimationFrame = (callback) => {
    if (!(new Error().stack || "").includes("/statustracker-")) {
      return frame(callback);
    }
    if (inTrackerFrame && !trackerShown()) {
      return 0;
    }
    return frame((time) => {
      inTrackerFrame = true;
      try {
        callback(time);
      } finally {
        inTrackerFrame = false;
      }
    });
  };
})();
