#!/usr/bin/env python3
"""Compare the SASS of the kernels in two `cuobjdump -sass` listings, without a GPU.

For every kernel of the first listing: its instruction count, the local-memory spills
(STL / LDL) of the whole function and of its innermost loop that holds at least --min-mma
tensor-core instructions (HGMMA / HMMA: the main loop), and whether the second listing's
kernel of the same name (after --rename substitutions, e.g. a template argument the change
added) has the same instructions (addresses stripped). Exit status 0; 1 when a kernel named
in --expect-same differs or is missing.

In a warp-specialised kernel (one with `setmaxnreg`: USETMAXREG.DEALLOC in the SASS) the
code from the DEALLOC on is the producer branch: the main loop is searched before it only
(ptxas places the producer after the consumers, and a backward branch from the producer
into the consumers' code spans both, which is no loop of either), and the producer's
outermost loop is reported too (its spills run at the producer's lowered budget).

  export PATH="$(bash scripts/sass_tools.sh):$PATH"
  cuobjdump -sass old.o > old.sass; cuobjdump -sass new.o > new.sass
  python3 scripts/sass_compare.py old.sass new.sass --filter prefill_ws_kernel \
      --rename 'ELb([01])EEEvNS=ELb\\1ELb0EEEvNS' --expect-same all
"""
import argparse
import re
import sys


def functions(path):
    """Kernel name -> list of instructions (text, address stripped), in listing order."""
    out = {}
    text = open(path).read()
    for part in re.split(r"\n\s*Function : ", text)[1:]:
        name = part.split("\n", 1)[0].strip()
        ins = []
        for line in part.split("\n"):
            m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", line)
            if m:
                ins.append((int(m.group(1), 16), m.group(2).strip()))
        out[name] = ins
    return out


def opcode(text):
    t = text.split()
    op = t[1] if t and t[0].startswith("@") and len(t) > 1 else (t[0] if t else "")
    return op.split(".")[0]


def backward_ranges(ins):
    """(first, last) index pairs of every backward branch: the loops, in listing order."""
    index = {a: i for i, (a, _) in enumerate(ins)}
    out = []
    for i, (a, t) in enumerate(ins):
        m = re.search(r"BRA\b.*?0x([0-9a-f]+)", t)
        if not m:
            continue
        target = int(m.group(1), 16)
        if target < a and target in index:
            out.append((index[target], i))
    return out


def producer_start(ins):
    """Index of the first USETMAXREG.DEALLOC (the producer branch of a warp-specialised
    kernel), or len(ins) when the kernel has none."""
    for i, (_, t) in enumerate(ins):
        if opcode(t) == "USETMAXREG" and ".DEALLOC" in t:
            return i
    return len(ins)


def main_loop(ins, min_mma):
    """The shortest backward-branch range holding >= min_mma tensor-core instructions, before
    the producer branch."""
    cut = producer_start(ins)
    best = None
    for j, i in backward_ranges(ins):
        if i >= cut:
            continue
        mma = sum(1 for _, u in ins[j:i + 1] if opcode(u) in ("HGMMA", "HMMA"))
        if mma >= min_mma and (best is None or i - j < best[1] - best[0]):
            best = (j, i)
    return best


def producer_loop(ins):
    """The longest backward-branch range wholly inside the producer branch (its tile loop),
    or None."""
    cut = producer_start(ins)
    best = None
    for j, i in backward_ranges(ins):
        if j > cut and (best is None or i - j > best[1] - best[0]):
            best = (j, i)
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("old")
    ap.add_argument("new", nargs="?")
    ap.add_argument("--filter", default="", help="only kernels whose name contains this")
    ap.add_argument("--rename", action="append", default=[],
                    help="A=B: re.sub(A, B) on the old names before matching")
    ap.add_argument("--min-mma", type=int, default=8)
    ap.add_argument("--expect-same", default="",
                    help="'all' or comma-separated name fragments that must be unchanged")
    args = ap.parse_args()
    for path in (args.old, args.new):
        if path is not None:
            try:
                open(path).close()
            except OSError as e:
                ap.error("cannot read listing %r: %s" % (path, e.strerror))
    for r in args.rename:
        if "=" not in r:
            ap.error("--rename %r: expected A=B" % r)
        try:
            re.compile(r.split("=", 1)[0])
        except re.error as e:
            ap.error("--rename %r: bad pattern: %s" % (r, e))
    old = {k: v for k, v in functions(args.old).items() if args.filter in k}
    new = functions(args.new) if args.new else {}
    # Names are printed without the prefix every kernel shares (namespaces, the template's
    # name), so the template arguments that tell instances apart stay visible.
    names = list(old)
    cut = len(names[0]) if names else 0
    for n in names[1:]:
        while cut and n[:cut] != names[0][:cut]:
            cut -= 1
    bad = 0
    for name, ins in old.items():
        key = name
        for r in args.rename:
            a, b = r.split("=", 1)
            key = re.sub(a, b, key)
        stl = sum(1 for _, t in ins if opcode(t) == "STL")
        ldl = sum(1 for _, t in ins if opcode(t) == "LDL")
        loop = main_loop(ins, args.min_mma)
        lp = ""
        if loop:
            body = ins[loop[0]:loop[1] + 1]
            lp = " main loop %d instr, STL %d, LDL %d" % (
                len(body), sum(1 for _, t in body if opcode(t) == "STL"),
                sum(1 for _, t in body if opcode(t) == "LDL"))
        ploop = producer_loop(ins)
        if ploop:
            body = ins[ploop[0]:ploop[1] + 1]
            lp += "; producer loop %d instr, STL %d, LDL %d" % (
                len(body), sum(1 for _, t in body if opcode(t) == "STL"),
                sum(1 for _, t in body if opcode(t) == "LDL"))
        shown = name[cut:] if len(names) > 1 else name
        line = "%s: %d instr, STL %d, LDL %d;%s" % (shown, len(ins), stl, ldl, lp)
        if args.new:
            other = new.get(key)
            if other is None:
                line += "; missing in the second listing"
                same = False
            else:
                diff = sum(1 for (_, a), (_, b) in zip(ins, other) if a != b)
                diff += abs(len(ins) - len(other))
                same = diff == 0
                line += "; same instructions" if same else "; %d instructions differ" % diff
            want = args.expect_same == "all" or any(
                f and f in name for f in args.expect_same.split(","))
            if want and not same:
                bad = 1
        print(line)
    if bad:
        print("kernels expected unchanged differ (or are missing)", file=sys.stderr)
    return bad


if __name__ == "__main__":
    sys.exit(main())
