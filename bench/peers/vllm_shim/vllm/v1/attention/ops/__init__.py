"""Package marker of the stand-in (see vllm/__init__.py)."""
