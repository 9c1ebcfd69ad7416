"""ReAnchor Explorer web app: python -m app."""
