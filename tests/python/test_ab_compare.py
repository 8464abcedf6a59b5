"""bench/ab_compare.py (same-run A/B of `pagedattn bench --json` rounds) on synthetic results:
the speed-up and noise arithmetic, the verdicts, rows that failed their check or ran on one
side only, and usage errors that name the file."""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOL = os.path.join(ROOT, "bench", "ab_compare.py")


def _bench(tmp_path, name, rows):
    """A bench JSON with one result per (workload, median_us[, check_pass]) tuple."""
    results = []
    for r in rows:
        w, us = r[0], r[1]
        res = {"name": w, "layout": "nhd", "median_us": us, "status": "ok",
               "check": {"pass": r[2] if len(r) > 2 else True}}
        results.append(res)
    path = tmp_path / name
    path.write_text(json.dumps({"device": "test", "results": results}))
    return str(path)


def _run(*args):
    return subprocess.run([sys.executable, TOOL, *args], capture_output=True, text=True,
                          timeout=60)


def test_speedup_noise_and_verdicts(tmp_path):
    a1 = _bench(tmp_path, "a1.json", [("W1", 100.0), ("W2", 50.0), ("W3", 80.0)])
    a2 = _bench(tmp_path, "a2.json", [("W1", 102.0), ("W2", 50.0), ("W3", 80.0)])
    b1 = _bench(tmp_path, "b1.json", [("W1", 90.0), ("W2", 50.5), ("W3", 88.0)])
    b2 = _bench(tmp_path, "b2.json", [("W1", 91.0), ("W2", 50.5), ("W3", 88.0)])
    md = tmp_path / "ab.md"
    p = _run(a1, a2, "--vs", b1, b2, "--labels", "base,new", "--markdown", str(md))
    assert p.returncode == 0, p.stderr
    lines = {l.split()[0]: l for l in p.stdout.splitlines()[1:] if l.strip()}
    # W1: mean 101 against 90.5 -> 1.116, noise 2% (A's rounds): B faster.
    assert "1.116" in lines["W1"] and "B faster" in lines["W1"], p.stdout
    # W2: 50 against 50.5 -> 0.990, no spread in either side: B slower, not noise.
    assert "0.990" in lines["W2"] and "B slower" in lines["W2"], p.stdout
    assert "0.909" in lines["W3"] and "B slower" in lines["W3"], p.stdout
    text = md.read_text()
    assert text.startswith("| workload | layout | base µs (rounds) | new µs (rounds) |")
    assert "| W1 | nhd | 100.0 / 102.0 | 90.0 / 91.0 | 1.116 | 2.0% | B faster |" in text


def test_difference_inside_the_round_spread_is_noise(tmp_path):
    a1 = _bench(tmp_path, "a1.json", [("W6", 50.0)])
    a2 = _bench(tmp_path, "a2.json", [("W6", 54.0)])  # 8% between A's rounds
    b1 = _bench(tmp_path, "b1.json", [("W6", 51.0)])
    p = _run(a1, a2, "--vs", b1)
    assert p.returncode == 0, p.stderr
    assert "within noise" in p.stdout, p.stdout


def test_failed_checks_and_one_sided_rows_are_listed_not_compared(tmp_path):
    a = _bench(tmp_path, "a.json", [("W1", 100.0), ("W4", 70.0), ("W5", 60.0)])
    b = _bench(tmp_path, "b.json", [("W1", 95.0), ("W4", 10.0, False), ("W7", 20.0)])
    p = _run(a, "--vs", b)
    assert p.returncode == 0, p.stderr
    body = [l.split()[0] for l in p.stdout.splitlines()[1:]
            if l and not l.startswith(("only", "not"))]
    assert body == ["W1"], p.stdout
    assert "not compared: B " in p.stdout and "W4 (nhd): ok check failed" in p.stdout
    assert "only in A: W4 (nhd)" in p.stdout and "only in A: W5 (nhd)" in p.stdout
    assert "only in B: W7 (nhd)" in p.stdout


def test_usage_errors_name_the_file(tmp_path):
    good = _bench(tmp_path, "good.json", [("W1", 1.0)])
    missing = str(tmp_path / "missing.json")
    p = _run(good, "--vs", missing)
    assert p.returncode == 2 and f"B file {missing}: cannot read it as JSON" in p.stderr, p.stderr
    notbench = tmp_path / "other.json"
    notbench.write_text(json.dumps({"rows": []}))
    p = _run(str(notbench), "--vs", good)
    assert p.returncode == 2 and f"A file {notbench}: no 'results' list" in p.stderr, p.stderr
    p = _run(good, "--vs", good, "--labels", "justone")
    assert p.returncode == 2 and "--labels 'justone'" in p.stderr, p.stderr
    p = _run(good)
    assert p.returncode == 2 and "--vs" in p.stderr, p.stderr
