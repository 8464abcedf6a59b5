#!/usr/bin/env python3
"""Same-run A/B of `pagedattn bench --json` results: rounds of A against rounds of B.

    python3 bench/ab_compare.py base_r1.json base_r2.json --vs new_r1.json new_r2.json \
        [--labels base,new] [--markdown ab.md]

Each file is one `pagedattn bench --json` run. Workloads are matched by (name, layout); for
each, the median call time of every round of A and of B (`median_us`, microseconds), their
means, the speed-up mean(A) / mean(B) (> 1: B is faster), and the noise: the largest relative
spread between the rounds of one side, (max - min) / min. A difference smaller than the noise
is reported as "within noise" (METHOD.md: compare within one run, alternate the rounds).
Rows whose output check failed, or that did not run ("status" other than "ok"), are listed
and not compared.

Exit status: 0 (the table printed), 2 usage errors (no files, a file that cannot be read or is
not a bench result; the message names it).
"""
import argparse
import json
import sys


def load_rounds(paths, side):
    """{(name, layout): [median_us per round]} and the rows left out, from bench JSON files."""
    rows, skipped = {}, []
    for path in paths:
        try:
            with open(path, encoding="utf-8") as f:
                doc = json.load(f)
        except (OSError, ValueError) as e:
            raise SystemExit(f"ab_compare.py: {side} file {path}: cannot read it as JSON ({e})")
        results = doc.get("results") if isinstance(doc, dict) else None
        if not isinstance(results, list):
            raise SystemExit(f"ab_compare.py: {side} file {path}: no 'results' list "
                             "(expected the output of `pagedattn bench --json`)")
        for r in results:
            if not isinstance(r, dict) or "name" not in r:
                continue
            key = (str(r["name"]), str(r.get("layout", "")))
            check = r.get("check") or {}
            if r.get("status", "ok") != "ok" or check.get("pass") is False:
                skipped.append((side, path, key, r.get("status", "ok"),
                                "check failed" if check.get("pass") is False else ""))
                continue
            us = r.get("median_us")
            if not isinstance(us, (int, float)) or us <= 0:
                skipped.append((side, path, key, "no median_us", ""))
                continue
            rows.setdefault(key, []).append(float(us))
    return rows, skipped


def spread(values):
    return (max(values) - min(values)) / min(values) if len(values) > 1 else 0.0


def compare(a_rows, b_rows):
    """One dict per workload present on both sides, in A's order."""
    out = []
    for key, a in a_rows.items():
        b = b_rows.get(key)
        if not b:
            continue
        ma, mb = sum(a) / len(a), sum(b) / len(b)
        noise = max(spread(a), spread(b))
        speedup = ma / mb
        if abs(speedup - 1.0) <= noise:
            verdict = "within noise"
        else:
            verdict = "B faster" if speedup > 1 else "B slower"
        out.append({"name": key[0], "layout": key[1], "a": a, "b": b, "mean_a": ma,
                    "mean_b": mb, "speedup": speedup, "noise": noise, "verdict": verdict})
    return out


def table(rows, labels, markdown):
    la, lb = labels
    head = ["workload", "layout", f"{la} µs (rounds)", f"{lb} µs (rounds)",
            f"{la}/{lb}", "noise", "verdict"]
    lines = []
    if markdown:
        lines.append("| " + " | ".join(head) + " |")
        lines.append("|" + "|".join(["---"] * 2 + ["---:"] * 4 + ["---"]) + "|")
    else:
        lines.append(f"{head[0]:<22} {head[1]:<6} {head[2]:>22} {head[3]:>22} "
                     f"{head[4]:>10} {head[5]:>6}  {head[6]}")
    for r in rows:
        ra = " / ".join(f"{v:.1f}" for v in r["a"])
        rb = " / ".join(f"{v:.1f}" for v in r["b"])
        cells = [r["name"], r["layout"], ra, rb, f"{r['speedup']:.3f}",
                 f"{100 * r['noise']:.1f}%", r["verdict"]]
        if markdown:
            lines.append("| " + " | ".join(cells) + " |")
        else:
            lines.append(f"{cells[0]:<22} {cells[1]:<6} {cells[2]:>22} {cells[3]:>22} "
                         f"{cells[4]:>10} {cells[5]:>6}  {cells[6]}")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("a", nargs="+", help="A's rounds: `pagedattn bench --json` files")
    ap.add_argument("--vs", nargs="+", required=True, metavar="B",
                    help="B's rounds: `pagedattn bench --json` files")
    ap.add_argument("--labels", default="A,B", help="names of the two sides, comma separated")
    ap.add_argument("--markdown", default=None, help="also write the table as Markdown")
    args = ap.parse_args(argv)
    labels = args.labels.split(",")
    if len(labels) != 2 or not all(labels):
        ap.error(f"--labels {args.labels!r}: expected two names separated by a comma")
    a_rows, a_skip = load_rounds(args.a, "A")
    b_rows, b_skip = load_rounds(args.vs, "B")
    rows = compare(a_rows, b_rows)
    print(table(rows, labels, markdown=False))
    only = sorted(set(a_rows) ^ set(b_rows))
    for name, layout in only:
        side = labels[0] if (name, layout) in a_rows else labels[1]
        print(f"only in {side}: {name} ({layout})")
    for side, path, (name, layout), status, why in a_skip + b_skip:
        who = labels[0] if side == "A" else labels[1]
        print(f"not compared: {who} {path}: {name} ({layout}): {status} {why}".rstrip())
    if args.markdown:
        try:
            with open(args.markdown, "w", encoding="utf-8") as f:
                f.write(table(rows, labels, markdown=True) + "\n")
        except OSError as e:
            raise SystemExit(f"ab_compare.py: --markdown {args.markdown}: cannot write ({e})")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except SystemExit as e:
        if isinstance(e.code, str):
            print(e.code, file=sys.stderr)
            sys.exit(2)
        raise
