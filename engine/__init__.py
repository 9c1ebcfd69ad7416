"""ReAnchor Explorer's engine: lossless DFlash / ReAnchor speculative decoding that records every round."""
import os as _os

# OpenMP threads that sleep when they have no work instead of spinning, set before torch is imported (a user's
# own setting wins): where another process is busy on the same few cores (the browser showing the app, on a
# 2-core laptop), spinning threads wait for each other's core and plain decoding runs at half the speed; on a
# quiet machine passive waiting costs nothing (the figures: docs/performance.md).
_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
