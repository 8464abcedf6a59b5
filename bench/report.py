#!/usr/bin/env python3
"""Join `pagedattn bench --json` with `sdpa_compare.py --json`: print the side-by-side table
(time ratio pagedattn / SDPA per workload) and plot effective bandwidth versus context length
and batch size (PNG), with the measured read ceiling as a line. The JSON of `pagedattn bench
--matrix` gives the matrix table instead (docs/performance.md, "The configuration matrix")."""
import argparse
import json


def matrix_table(bench):
    """Markdown table of a `bench --matrix` JSON: one line per row, unsupported rows with their
    reason, skewed rows with their time over the even row's."""
    lines = [f"device: {bench['device']}; read ceiling {bench['read_ceiling_gbps']:.0f} GB/s; "
             f"L2 flush {bench.get('l2_flush', '?')}",
             "",
             "| row | µs | GB/s | % ceiling | splits | vs even | kernel | check |",
             "|---|---:|---:|---:|---:|---:|---|---|"]
    for r in bench["results"]:
        if r.get("status", "ok") != "ok":
            lines.append(f"| {r['name']} | {r['status']}: {r.get('reason', '')} | | | | | | |")
            continue
        even = f"{r['vs_even']:.2f}" if r.get("vs_even") else ""
        ck = r.get("check", {})
        check = f"{ck.get('mode', '-')} {ck.get('worst_ratio', 0):.2g}" if ck else "-"
        lines.append(f"| {r['name']} | {r['median_us']:.1f} | {r['gbps']:.0f} | "
                     f"{r['pct_of_ceiling']:.1f}% | {r['splits']} | {even} | {r['kernel']} | {check} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bench_json")
    ap.add_argument("--sdpa", default=None)
    ap.add_argument("--png", default=None)
    ap.add_argument("--markdown", default=None, help="write the table as Markdown")
    args = ap.parse_args()
    try:
        bench = json.load(open(args.bench_json))
        bench["read_ceiling_gbps"], bench["results"], bench["device"], bench["layout"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise SystemExit(f"report.py: {args.bench_json}: not the JSON of `pagedattn bench --json` ({e!r})")
    # JSON written before --flush existed records only l2_flushed (the write-only flush).
    def flush_of(doc):
        return doc.get("l2_flush", "dirty" if doc.get("l2_flushed", True) else "none")
    sdpa = {}
    if args.sdpa:
        try:
            sdoc = json.load(open(args.sdpa))
            if not all("best_backend" in r for r in sdoc["results"] if "median_us" in r):
                raise KeyError("best_backend")
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise SystemExit(
                f"report.py: {args.sdpa}: not the JSON of `sdpa_compare.py --json` ({e!r})")
        if flush_of(sdoc) != flush_of(bench):
            raise SystemExit(f"report.py: {args.bench_json} was timed with flush "
                             f"'{flush_of(bench)}', {args.sdpa} with '{flush_of(sdoc)}': "
                             "the ratios would compare different methods")
        for r in sdoc["results"]:
            if "median_us" in r:
                sdpa[r["name"]] = r
    ceiling = bench["read_ceiling_gbps"]
    if any(r.get("group") == "matrix" for r in bench["results"]):
        # `pagedattn bench --matrix`: the table of docs/performance.md, "The configuration matrix".
        text = matrix_table(bench)
        print(text)
        if args.markdown:
            open(args.markdown, "w").write(text + "\n")
        return
    lines = [f"device: {bench['device']}; read ceiling {ceiling:.0f} GB/s; "
             f"layout {bench['layout']}; L2 flush {flush_of(bench)}",
             "",
             "| workload | pagedattn us | graph us | GB/s | % ceiling | splits | kernel | SDPA us (backend) | pagedattn/SDPA |",
             "|---|---:|---:|---:|---:|---:|---|---:|---:|"]
    for r in bench["results"]:
        if r.get("status", "ok") != "ok":  # a row that failed its check or did not run
            lines.append(f"| {r['name']} | {r['status']}: {r.get('reason', '')} | | | | | | | |")
            continue
        s = sdpa.get(r["name"])
        sd = f"{s['median_us']:.1f} ({s['best_backend']})" if s else "-"
        ratio = f"{r['median_us'] / s['median_us']:.2f}" if s else "-"
        g = f"{r['graph_median_us']:.1f}" if r["graph_median_us"] >= 0 else "-"
        # JSON written before "kernel" named the kernels that ran kept them in "kernels".
        lines.append(f"| {r['name']} | {r['median_us']:.1f} | {g} | {r['gbps']:.0f} | "
                     f"{r['pct_of_ceiling']:.1f}% | {r['splits']} | {r.get('kernels', r['kernel'])} | {sd} | {ratio} |")
    text = "\n".join(lines)
    print(text)
    if args.markdown:
        open(args.markdown, "w").write(text + "\n")
    if args.png and not any(r["group"] in ("sweep-ctx", "sweep-batch") for r in bench["results"]):
        # An empty plot would look like a result; say what is missing instead.
        raise SystemExit("report.py: no sweep rows in %s (run `pagedattn bench --sweep`); no PNG written"
                         % args.bench_json)
    if args.png:
        try:
            import matplotlib
        except ImportError:
            raise SystemExit("report.py: --png needs matplotlib (python3 -m pip install matplotlib); "
                             "the table above is complete")
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
        for ax, group, key, label in ((axes[0], "sweep-ctx", "max_seq_len", "context length (tokens), batch 64"),
                                      (axes[1], "sweep-batch", "num_seqs", "batch size (sequences), context 4096")):
            rows = sorted((r for r in bench["results"]
                           if r["group"] == group and r.get("status", "ok") == "ok"),
                          key=lambda r: r[key])
            if rows:
                xs = [r[key] for r in rows]
                ax.plot(xs, [r["gbps"] for r in rows], "o-", label="pagedattn")
                sd = [(r[key], r["bytes"] / (sdpa[r["name"]]["median_us"] * 1e-6) / 1e9)
                      for r in rows if r["name"] in sdpa]
                if sd:
                    ax.plot([a for a, _ in sd], [b for _, b in sd], "s--", label="PyTorch SDPA (dense)")
            ax.axhline(ceiling, color="gray", linestyle=":", label=f"read ceiling {ceiling:.0f} GB/s")
            ax.set_xscale("log", base=2)
            ax.set_xlabel(label)
            ax.set_ylabel("effective bandwidth (GB/s)")
            ax.set_ylim(0, ceiling * 1.1)
            ax.grid(True, alpha=0.3)
            ax.legend()
        fig.suptitle(f"pagedattn decode, bf16, 32/8 heads, head 128, block 16 ({bench['device']})")
        fig.tight_layout()
        fig.savefig(args.png, dpi=110)


if __name__ == "__main__":
    main()
