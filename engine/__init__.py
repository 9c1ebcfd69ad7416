"""ReAnchor Explorer's engine: lossless DFlash / ReAnchor speculative decoding that records every round."""
import os as _os

# OpenMP threads that sleep when they have no work instead of spinning, set before torch is imported (a user's
# own setting wins). On a 2-core machine with one other busy process (the browser showing the app, on the same
# laptop), spinning threads wait for each other's core: plain decoding of the embedded model ran at 4.6-5.0
# tokens/s against 10.3-11.2 passive; on a quiet machine 7.8-8.4 against 8.7-8.8 (docs/performance.md).
_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
