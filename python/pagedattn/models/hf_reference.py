"""The independent check of the paged model: transformers' LlamaForCausalLM loaded from the
same GGUF file, fed each request's token sequence incrementally (its own DynamicCache and
attention), giving the next-token logits that the paged model must reproduce."""

from __future__ import annotations

import os

import torch


def load_hf_llama(gguf_path: str, dtype=torch.float32, attn_implementation: str = "sdpa"):
    """transformers.LlamaForCausalLM.from_pretrained(dir, gguf_file=name) in eval mode.
    Needs transformers (and accelerate, which its GGUF loader requires); no network (the
    configuration and tokenizer come from the file)."""
    from transformers import LlamaForCausalLM

    d, name = os.path.split(os.path.abspath(gguf_path))
    m = LlamaForCausalLM.from_pretrained(d, gguf_file=name, dtype=dtype,
                                         attn_implementation=attn_implementation,
                                         local_files_only=True)
    return m.eval()


class ReferenceLogits:
    """Per request, the logits transformers gives after the request's tokens so far.

    logits(request_id, tokens) feeds the tokens not yet seen (a prefix of `tokens` must be
    what was fed before) and returns [vocab] fp32 logits after the last one."""

    def __init__(self, hf_model):
        self.model = hf_model
        self.state = {}  # request id -> (tokens fed, past_key_values)

    @torch.inference_mode()
    def logits(self, request_id: int, tokens) -> torch.Tensor:
        from transformers import DynamicCache

        fed, past = self.state.get(request_id, ([], None))
        if tokens[:len(fed)] != fed or len(tokens) <= len(fed):
            raise ValueError(f"request {request_id}: tokens are not an extension of the fed ones")
        if past is None:
            past = DynamicCache()
        dev = next(self.model.parameters()).device
        new = torch.tensor([tokens[len(fed):]], dtype=torch.int64, device=dev)
        pos = torch.arange(len(fed), len(tokens), device=dev)[None]
        out = self.model(input_ids=new, past_key_values=past, position_ids=pos, use_cache=True)
        self.state[request_id] = (list(tokens), out.past_key_values)
        return out.logits[0, -1].float()

    def drop(self, request_id: int) -> None:
        self.state.pop(request_id, None)

    @torch.inference_mode()
    def all_positions(self, tokens) -> torch.Tensor:
        """[len(tokens), vocab] fp32: row i = the logits after tokens[: i + 1], from one
        forward over the whole sequence (causal, so row i sees only its prefix)."""
        dev = next(self.model.parameters()).device
        ids = torch.tensor([list(tokens)], dtype=torch.int64, device=dev)
        return self.model(input_ids=ids, use_cache=False).logits[0].float()


def compare_step(engine, record, ref: ReferenceLogits):
    """For each token sampled in `record` (an Engine StepRecord made with keep_logits=True):
    (request id, max |paged logits - transformers logits|, paged token == transformers argmax,
    tokens before it). The sampled token is compared with transformers' argmax, so the check is
    meaningful for greedy requests only."""
    rows = []
    for rid, tok, lg in record.sampled:
        if lg is None:
            raise ValueError("compare_step: the engine must keep logits (keep_logits=True)")
        r = engine.requests[rid]
        # Called right after Engine.step: the token is the request's last output and its
        # logits are those after every token before it.
        n = len(r.tokens) - 1
        want = ref.logits(rid, r.tokens[:n])
        rows.append((rid, float((lg.float().cpu() - want.cpu()).abs().max()),
                     int(want.argmax()) == tok, n))
        if r.finished:
            ref.drop(rid)
    return rows

