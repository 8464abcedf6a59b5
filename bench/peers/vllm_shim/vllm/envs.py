"""The environment switches the Triton attention module reads (vLLM's defaults)."""
import os

#: vLLM's batch-invariant mode forces the single-pass (2D) kernel; off by default there.
VLLM_BATCH_INVARIANT = os.environ.get("VLLM_BATCH_INVARIANT", "0") == "1"
VLLM_TRITON_FORCE_FIRST_CONFIG = False
