"""ReAnchor Explorer web app: python -m app."""
from .gradio_stubs import skip_stub_writing

skip_stub_writing()   # before any module of the app imports gradio
