"""ReAnchor Explorer's engine: lossless DFlash / ReAnchor speculative decoding that records every round."""
