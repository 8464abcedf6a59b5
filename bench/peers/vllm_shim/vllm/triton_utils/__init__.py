"""triton and triton.language, as vllm.triton_utils exports them (Triton is installed)."""
import triton
import triton.language as tl

HAS_TRITON = True
