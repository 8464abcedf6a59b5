"""A stand-in for the `vllm` package, just enough for vLLM's Triton attention module
(vllm/v1/attention/ops/triton_unified_attention.py), which bench/peers/fetch_peers.sh extracts
from the vllm wheel next to these files. Importing the real vllm pulls in its whole engine and
compiled extensions; the kernel needs only the few names these modules define. Written for the
bench (no vLLM code here)."""
