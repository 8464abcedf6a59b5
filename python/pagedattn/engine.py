"""A minimal serving loop around a paged model (pagedattn.models.PagedLlama): a block
allocator, a continuous-batching scheduler with a token budget per step, and sampling.

Scheduling follows the C++ `pagedattn run` scheduler (src/serving/replay.cpp): each step
takes the running decodes first (one token each), then the running partial prefills, then
admits waiting requests in arrival order, each prompt chunked to what is left of the token
budget. A request is admitted only when the blocks for its prompt plus max_new_tokens can be
reserved, so that a running request never waits for memory (no preemption); its blocks are
taken from the allocator as its tokens arrive and returned when it finishes.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

import torch


class BlockAllocator:
    """Free list of physical cache blocks 0 .. num_blocks-1 with reservations.

    allocate() hands out the blocks freed last first (a finished request's blocks are reused
    at once, in that request's order), so that a long run keeps touching a few hot blocks."""

    def __init__(self, num_blocks: int):
        if num_blocks < 1:
            raise ValueError(f"num_blocks: {num_blocks}, must be >= 1")
        self.num_blocks = num_blocks
        self._free = list(range(num_blocks - 1, -1, -1))
        self.reserved = 0  # blocks promised to admitted requests, allocated or not

    @property
    def num_free(self) -> int:
        return len(self._free)

    def can_reserve(self, n: int) -> bool:
        return self.reserved + n <= self.num_blocks

    def reserve(self, n: int) -> None:
        if not self.can_reserve(n):
            raise RuntimeError(f"reserve({n}): {self.reserved} of {self.num_blocks} reserved")
        self.reserved += n

    def allocate(self) -> int:
        if not self._free:
            raise RuntimeError("block allocator: no free block (a reservation was exceeded)")
        return self._free.pop()

    def free(self, blocks, reserved: int) -> None:
        """Return `blocks` and release a reservation of `reserved` blocks."""
        if len(set(blocks)) != len(blocks) or any(b in self._free for b in blocks):
            raise RuntimeError(f"block allocator: double free of {blocks}")
        self._free.extend(reversed(blocks))
        self.reserved -= reserved


@dataclass
class SamplingParams:
    """temperature 0 = greedy (argmax); otherwise softmax(logits / temperature) restricted to
    the smallest set of tokens whose probability reaches top_p (nucleus sampling, Holtzman et
    al. 2020), drawn with a torch.Generator seeded with `seed` (per request: reproducible
    whatever the batch)."""

    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 0
    max_new_tokens: int = 32
    stop_token_ids: tuple = ()

    def validate(self):
        if not self.temperature >= 0:
            raise ValueError(f"temperature: {self.temperature}, must be >= 0")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p: {self.top_p}, must be in (0, 1]")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens: {self.max_new_tokens}, must be >= 1")


@dataclass
class Request:
    """One generation: prompt token ids, the generated ids, its cache blocks."""

    id: int
    prompt_ids: list
    params: SamplingParams
    output_ids: list = field(default_factory=list)
    blocks: list = field(default_factory=list)
    reserved_blocks: int = 0
    computed: int = 0            # tokens whose K/V are in the cache
    admitted_step: int = -1
    finished_step: int = -1
    finish_reason: str = ""
    generator: torch.Generator | None = None

    @property
    def tokens(self) -> list:
        return self.prompt_ids + self.output_ids

    @property
    def finished(self) -> bool:
        return bool(self.finish_reason)


def sample(logits: torch.Tensor, params: SamplingParams, generator) -> int:
    """Next token from [vocab] fp32 logits under `params` (see SamplingParams)."""
    if params.temperature == 0:
        return int(torch.argmax(logits))
    probs = torch.softmax(logits.float() / params.temperature, dim=-1)
    if params.top_p < 1:
        p, idx = torch.sort(probs, descending=True)
        keep = torch.cumsum(p, 0) - p < params.top_p  # tokens before reaching top_p, + 1
        p = p * keep
        choice = torch.multinomial(p / p.sum(), 1, generator=generator)
        return int(idx[choice])
    return int(torch.multinomial(probs, 1, generator=generator))


@dataclass
class StepRecord:
    """What one step did: (request id, first token index, token count) per scheduled chunk,
    the sampled (request id, token, logits) and its wall time."""

    step: int
    chunks: list
    sampled: list
    seconds: float
    attention_seconds: float


class Engine:
    """Continuous batching over a PagedLlama and its PagedKVCache.

    Args:
        model: pagedattn.models.PagedLlama.
        cache: pagedattn.models.PagedKVCache (its num_blocks and block_size rule admission).
        token_budget: most tokens per step (decodes + prefill chunks), >= 1.
        max_seqs: most running requests.
        keep_logits: keep each sampled token's logits in StepRecord.sampled (for checks).

    add_request() may be called between steps; step() runs one step; run() steps until every
    request has finished."""

    def __init__(self, model, cache, token_budget: int = 256, max_seqs: int = 256,
                 keep_logits: bool = False):
        if token_budget < 1:
            raise ValueError(f"token_budget: {token_budget}, must be >= 1")
        if max_seqs < 1:
            raise ValueError(f"max_seqs: {max_seqs}, must be >= 1")
        self.model = model
        self.cache = cache
        self.block_size = cache.block_size
        self.allocator = BlockAllocator(cache.num_blocks)
        self.token_budget = token_budget
        self.max_seqs = max_seqs
        self.keep_logits = keep_logits
        self.waiting: deque = deque()
        self.running: list = []
        self.finished: list = []
        self.requests: dict = {}
        self.step_count = 0
        self._next_id = 0

    def _blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.block_size)

    def validate_request(self, prompt_ids, params: SamplingParams) -> None:
        """Raise ValueError for an empty prompt, token ids outside the vocabulary, or a
        prompt + max_new_tokens that the whole cache (or the model's context length) cannot
        hold; bad sampling parameters. Changes nothing."""
        params.validate()
        prompt_ids = [int(t) for t in prompt_ids]
        if not prompt_ids:
            raise ValueError("prompt: empty (at least one token is needed)")
        vocab = self.model.cfg.vocab_size
        bad = [t for t in prompt_ids if not 0 <= t < vocab]
        if bad:
            raise ValueError(f"prompt: token id {bad[0]} outside the vocabulary [0, {vocab})")
        total = len(prompt_ids) + params.max_new_tokens
        if self._blocks_for(total) > self.cache.num_blocks:
            raise ValueError(
                f"prompt: {len(prompt_ids)} tokens + max_new_tokens {params.max_new_tokens} = "
                f"{total} tokens, more than the cache holds ({self.cache.num_blocks} blocks of "
                f"{self.block_size} = {self.cache.num_slots} tokens)")
        ctx = self.model.cfg.max_position_embeddings
        if total > ctx:
            raise ValueError(f"prompt: {total} tokens with max_new_tokens, more than the "
                             f"model's context length {ctx}")

    def add_request(self, prompt_ids, params: SamplingParams | None = None) -> Request:
        """Queue a prompt (list of token ids) with `params` (default: greedy, 32 tokens).
        Raises ValueError as validate_request, changing nothing."""
        params = params or SamplingParams()
        self.validate_request(prompt_ids, params)
        prompt_ids = [int(t) for t in prompt_ids]
        r = Request(self._next_id, prompt_ids, params)
        if params.temperature > 0:
            r.generator = torch.Generator().manual_seed(params.seed)
        self._next_id += 1
        self.waiting.append(r)
        self.requests[r.id] = r
        return r

    @property
    def done(self) -> bool:
        return not self.waiting and not self.running

    def _schedule(self):
        """[(request, start, count)] for this step (decodes, partial prefills, admissions)."""
        budget = self.token_budget
        chunks = []
        for r in self.running:  # decodes: every prompt token computed, one new token
            if budget == 0:
                break
            if r.computed >= len(r.prompt_ids):
                chunks.append((r, r.computed, 1))
                budget -= 1
        for r in self.running:  # partial prefills, oldest first
            if budget == 0:
                break
            if r.computed < len(r.prompt_ids):
                n = min(budget, len(r.prompt_ids) - r.computed)
                chunks.append((r, r.computed, n))
                budget -= n
        while budget > 0 and self.waiting and len(self.running) < self.max_seqs:
            r = self.waiting[0]
            need = self._blocks_for(len(r.prompt_ids) + r.params.max_new_tokens)
            if not self.allocator.can_reserve(need):
                break  # arrival order: a later, smaller request would starve this one
            self.waiting.popleft()
            self.allocator.reserve(need)
            r.reserved_blocks = need
            r.admitted_step = self.step_count
            self.running.append(r)
            n = min(budget, len(r.prompt_ids))
            chunks.append((r, 0, n))
            budget -= n
        return chunks

    def _build(self, chunks):
        from .models.llama import StepInput

        ids, pos, slots, qsl, seq_lens, logits_rows = [], [], [], [0], [], []
        for r, start, n in chunks:
            end = start + n
            while len(r.blocks) * self.block_size < end:
                r.blocks.append(self.allocator.allocate())
            toks = r.tokens
            ids += toks[start:end]
            pos += range(start, end)
            slots += [r.blocks[p // self.block_size] * self.block_size + p % self.block_size
                      for p in range(start, end)]
            qsl.append(qsl[-1] + n)
            seq_lens.append(end)
            if end == len(toks):  # the chunk reaches the last known token: sample after it
                logits_rows.append(qsl[-1] - 1)
        width = max(len(r.blocks) for r, _, _ in chunks)
        table = torch.zeros((len(chunks), width), dtype=torch.int32)
        for i, (r, _, _) in enumerate(chunks):
            table[i, :len(r.blocks)] = torch.tensor(r.blocks, dtype=torch.int32)
        i64 = torch.int64
        return StepInput(
            input_ids=torch.tensor(ids, dtype=i64), positions=torch.tensor(pos, dtype=i64),
            slot_mapping=torch.tensor(slots, dtype=i64), block_table=table,
            seq_lens=torch.tensor(seq_lens, dtype=torch.int32),
            query_start_loc=torch.tensor(qsl, dtype=torch.int32),
            logits_indices=torch.tensor(logits_rows, dtype=i64))

    def step(self) -> StepRecord:
        """Schedule, run the model once, sample, retire finished requests."""
        if self.done:
            raise RuntimeError("Engine.step: no request left")
        t0 = time.perf_counter()
        a0 = self.model.attention_seconds
        chunks = self._schedule()
        batch = self._build(chunks)
        logits = self.model(batch, self.cache)
        sampled = []
        row = 0
        # Every greedy token in one device-to-host copy (not one synchronisation per request).
        greedy = logits.argmax(dim=-1).tolist() if len(logits) else []
        for r, start, n in chunks:
            r.computed = start + n
            if r.computed < len(r.tokens):
                continue  # a prefill chunk short of the prompt's end
            lg = logits[row]
            tok = greedy[row] if r.params.temperature == 0 else sample(lg, r.params, r.generator)
            row += 1
            r.output_ids.append(tok)
            sampled.append((r.id, tok, lg if self.keep_logits else None))
            if tok in r.params.stop_token_ids:
                r.finish_reason = "stop"
            elif len(r.output_ids) >= r.params.max_new_tokens:
                r.finish_reason = "length"
            if r.finished:
                r.finished_step = self.step_count
                self.allocator.free(r.blocks, r.reserved_blocks)
                r.blocks = []
        self.running = [r for r in self.running if not r.finished]
        self.finished += [r for r, _, _ in chunks if r.finished and r not in self.finished]
        rec = StepRecord(self.step_count, [(r.id, s, n) for r, s, n in chunks], sampled,
                         time.perf_counter() - t0, self.model.attention_seconds - a0)
        self.step_count += 1
        return rec

    def run(self, on_step=None):
        """Step until every request has finished; on_step(record) after each step."""
        while not self.done:
            rec = self.step()
            if on_step is not None:
                on_step(rec)
