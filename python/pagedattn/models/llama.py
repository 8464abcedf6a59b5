"""A Llama decoder in PyTorch whose attention is pagedattn's only: each step writes the new
tokens' keys and values into every layer's paged cache with `pagedattn.write_kv`, plans the
step once with `pagedattn.BatchAttention.plan` and runs it once per layer.

The math follows transformers' LlamaForCausalLM (modeling_llama.py), so that logits can be
compared with it: RMSNorm in fp32 (Zhang & Sennrich 2019), rotary embeddings in the
rotate_half form (Su et al. 2021, RoFormer, eq. 34, with inv_freq = theta^(-2i/d)), SwiGLU
MLP (Shazeer 2020), grouped-query attention (Ainslie et al. 2023), head tied to the
embeddings when the checkpoint has no output matrix.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

import pagedattn

from .gguf_llama import LlamaConfig

LAYOUTS = ("nhd", "hnd", "split")


@dataclass
class StepInput:
    """One engine step, packed (varlen): T new tokens of S sequences.

    input_ids: [T] int64; positions: [T] int64 (index of each token in its sequence);
    slot_mapping: [T] int64 (block * block_size + offset of each token's K/V);
    block_table: [S, max_blocks] int32, seq_lens: [S] int32 (KV length after this step),
    query_start_loc: [S + 1] int32 (host tensors, as BatchAttention.plan reads them);
    logits_indices: [N] int64, the rows (token indices) whose next-token logits are wanted.
    """

    input_ids: torch.Tensor
    positions: torch.Tensor
    slot_mapping: torch.Tensor
    block_table: torch.Tensor
    seq_lens: torch.Tensor
    query_start_loc: torch.Tensor
    logits_indices: torch.Tensor


class PagedKVCache:
    """The K/V cache of every layer: one tensor per K and V of shape [layers, *block shape] and
    a pagedattn.KVCache view per layer.

    Block shapes (DESIGN.md §1): nhd [num_blocks, block_size, kv_heads, head_dim], hnd
    [num_blocks, kv_heads, block_size, head_dim], split key [num_blocks, kv_heads,
    head_dim / x, block_size, x] with x = 16 bytes / element size and value [num_blocks,
    kv_heads, head_dim, block_size]. dtype: the model dtype. Memory: 2 * layers * num_blocks *
    block_size * kv_heads * head_dim elements.
    """

    def __init__(self, cfg: LlamaConfig, num_blocks: int, block_size: int, layout: str,
                 dtype: torch.dtype, device):
        if layout not in LAYOUTS:
            raise ValueError(f"layout: {layout!r}, expected one of {', '.join(LAYOUTS)}")
        if num_blocks < 1 or block_size < 1:
            raise ValueError(f"num_blocks {num_blocks} / block_size {block_size}: must be >= 1")
        L, kvh, d = cfg.num_hidden_layers, cfg.num_key_value_heads, cfg.head_dim
        if layout == "nhd":
            ks = vs = (num_blocks, block_size, kvh, d)
        elif layout == "hnd":
            ks = vs = (num_blocks, kvh, block_size, d)
        else:
            x = 16 // torch.empty((), dtype=dtype).element_size()
            ks = (num_blocks, kvh, d // x, block_size, x)
            vs = (num_blocks, kvh, d, block_size)
        self.layout = layout
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.key = torch.zeros((L,) + ks, dtype=dtype, device=device)
        self.value = torch.zeros((L,) + vs, dtype=dtype, device=device)
        self.layers = [pagedattn.KVCache(self.key[i], self.value[i], layout=layout)
                       for i in range(L)]

    @property
    def num_slots(self) -> int:
        return self.num_blocks * self.block_size


def _rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    # In fp32 whatever the model dtype, as transformers' LlamaRMSNorm.
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return w * h.to(x.dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


class PagedLlama(torch.nn.Module):
    """Llama forward over a paged KV cache.

    Args:
        cfg: the shapes (gguf_llama.LlamaConfig).
        weights: dict of tensors named as transformers' state dict (load_gguf_llama, or
            random_llama_weights); converted to `dtype` on `device`.
        dtype: torch.float32 / float16 / bfloat16 (activations, weights and cache).
        device: "cpu" or "cuda[:N]".

    `forward(step, cache)` returns [N, vocab] fp32 logits of step.logits_indices;
    `attention_seconds` accumulates the wall time of write_kv + plan + run (synchronised
    on CUDA only when `time_attention` is set, as the synchronisation itself costs).
    """

    def __init__(self, cfg: LlamaConfig, weights: dict, dtype=torch.float32, device="cpu"):
        super().__init__()
        self.cfg = cfg
        self.dtype = dtype
        self.device = torch.device(device)
        w = {k: v.to(device=self.device, dtype=dtype) for k, v in weights.items()}
        self.embed = w["model.embed_tokens.weight"]
        self.lm_head = w.get("lm_head.weight", self.embed)
        self.final_norm = w["model.norm.weight"]
        self.layers = []
        for i in range(cfg.num_hidden_layers):
            p = f"model.layers.{i}."
            self.layers.append({
                "ln1": w[p + "input_layernorm.weight"],
                "ln2": w[p + "post_attention_layernorm.weight"],
                # Q, K and V in one matrix: one GEMM instead of three.
                "qkv": torch.cat([w[p + "self_attn.q_proj.weight"], w[p + "self_attn.k_proj.weight"],
                                  w[p + "self_attn.v_proj.weight"]], 0),
                "o": w[p + "self_attn.o_proj.weight"],
                "gate_up": torch.cat([w[p + "mlp.gate_proj.weight"], w[p + "mlp.up_proj.weight"]], 0),
                "down": w[p + "mlp.down_proj.weight"],
            })
        d = cfg.head_dim
        self.inv_freq = 1.0 / (cfg.rope_theta ** (
            torch.arange(0, d, 2, dtype=torch.int64, device=self.device).float() / d))
        self.attn = pagedattn.BatchAttention(device=str(self.device))
        self.time_attention = False
        self.attention_seconds = 0.0

    def _rope(self, positions: torch.Tensor):
        freqs = positions.float()[:, None] * self.inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(self.dtype)[:, None, :], emb.sin().to(self.dtype)[:, None, :]

    @torch.inference_mode()
    def forward(self, step: StepInput, cache: PagedKVCache) -> torch.Tensor:
        import time

        cfg = self.cfg
        H, KVH, D = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        dev = self.device
        ids = step.input_ids.to(dev, non_blocking=True)
        slots = step.slot_mapping.to(dev, non_blocking=True)
        T = ids.shape[0]
        cos, sin = self._rope(step.positions.to(dev, non_blocking=True))
        sync = self.time_attention and dev.type == "cuda"

        def clock():
            if sync:
                torch.cuda.synchronize(dev)
            return time.perf_counter()

        t0 = clock()
        self.attn.plan(step.block_table, step.seq_lens, step.query_start_loc, num_heads=H,
                       num_kv_heads=KVH, head_size=D)
        t_attn = clock() - t0
        h = F.embedding(ids, self.embed)
        for i, layer in enumerate(self.layers):
            x = _rms_norm(h, layer["ln1"], cfg.rms_norm_eps)
            q, k, v = F.linear(x, layer["qkv"]).split([H * D, KVH * D, KVH * D], dim=-1)
            q = q.view(T, H, D)
            k = k.view(T, KVH, D)
            v = v.view(T, KVH, D)
            q = q * cos + _rotate_half(q) * sin
            k = k * cos + _rotate_half(k) * sin
            t0 = clock()
            pagedattn.write_kv(k, v.contiguous(), slots, cache.layers[i])
            a = self.attn.run(q, cache.layers[i])
            t_attn += clock() - t0
            h = h + F.linear(a.view(T, H * D), layer["o"])
            x = _rms_norm(h, layer["ln2"], cfg.rms_norm_eps)
            g, u = F.linear(x, layer["gate_up"]).chunk(2, dim=-1)
            h = h + F.linear(F.silu(g) * u, layer["down"])
        self.attention_seconds += t_attn
        h = h[step.logits_indices.to(dev)]
        h = _rms_norm(h, self.final_norm, cfg.rms_norm_eps)
        return F.linear(h, self.lm_head).float()


def llama_config_from_hf(hf_config) -> LlamaConfig:
    """LlamaConfig from a transformers LlamaConfig (for the random-weight models of the bench)."""
    heads = hf_config.num_attention_heads
    rope = getattr(hf_config, "rope_parameters", None) or {}
    theta = rope.get("rope_theta", getattr(hf_config, "rope_theta", 10000.0))
    scaling = getattr(hf_config, "rope_scaling", None) or {}  # transformers < 5
    kind = rope.get("rope_type", scaling.get("rope_type", scaling.get("type", "default")))
    if kind != "default":
        raise NotImplementedError(f"rope_type {kind!r}: PagedLlama implements plain RoPE only")
    return LlamaConfig(
        vocab_size=hf_config.vocab_size, hidden_size=hf_config.hidden_size,
        intermediate_size=hf_config.intermediate_size,
        num_hidden_layers=hf_config.num_hidden_layers, num_attention_heads=heads,
        num_key_value_heads=hf_config.num_key_value_heads,
        head_dim=getattr(hf_config, "head_dim", None) or hf_config.hidden_size // heads,
        rope_theta=float(theta), rms_norm_eps=hf_config.rms_norm_eps,
        tie_word_embeddings=bool(hf_config.tie_word_embeddings),
        bos_token_id=hf_config.bos_token_id, eos_token_id=hf_config.eos_token_id,
        max_position_embeddings=hf_config.max_position_embeddings, name="random")
