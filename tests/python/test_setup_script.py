"""scripts/setup.sh's torch step, run for real against stand-ins for python3, dpkg and cmake
(nothing is installed or built): where torch's CPU index fails and PyPI works the script says
so in one line, with none of pip's "ERROR:" lines, and goes on; where PyPI fails too it shows
pip's output, says what to do, and stops with status 1 as before."""
import os
import stat
import subprocess
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# pip's output when download.pytorch.org does not resolve (pip 23, --retries 1).
UNREACHABLE = textwrap.dedent("""\
    WARNING: Retrying (Retry(total=0, connect=None, read=None, redirect=None, status=None)) after connection broken by 'NewConnectionError('<pip._vendor.urllib3.connection.HTTPSConnection object at 0x7f>: Failed to establish a new connection: [Errno -3] Temporary failure in name resolution')': /whl/cpu/torch/
    ERROR: Could not find a version that satisfies the requirement torch (from versions: none)
    ERROR: No matching distribution found for torch
""")
NO_WHEEL = textwrap.dedent("""\
    ERROR: Could not find a version that satisfies the requirement torch (from versions: none)
    ERROR: No matching distribution found for torch
""")

# A python3 that answers setup.sh's checks: headers, pip, the pip packages present, torch
# absent until a `pip install ... torch` succeeds; STUB_CPU / STUB_PYPI choose what the two
# torch installs print and whether they succeed.
PYTHON = textwrap.dedent("""\
    #!/usr/bin/env bash
    echo "$*" >> "$STUB_DIR/calls"
    if [ "$1" = -V ]; then echo "Python 3.99.0"; exit 0; fi
    if [ "$1" = -c ]; then
      case "$2" in
        *EXTERNALLY-MANAGED*) exit 1 ;;
        *"import torch"*) test -e "$STUB_DIR/torch"; exit ;;
        *"import pagedattn"*) echo "pagedattn 0.1.0 cpu"; exit 0 ;;
        *) exit 0 ;;
      esac
    fi
    if [ "$1 $2 $3" = "-m pip --version" ]; then exit 0; fi
    if [ "$1 $2 $3" = "-m pip install" ]; then
      case "$*" in
        *download.pytorch.org*) mode=$STUB_CPU ;;
        *" torch") mode=$STUB_PYPI ;;
        *) exit 0 ;;
      esac
      if [ "$mode" = ok ]; then touch "$STUB_DIR/torch"; exit 0; fi
      cat "$STUB_DIR/$mode" >&2
      exit 1
    fi
    exit 0
""")


def _setup(tmp_path, cpu, pypi):
    stubs = tmp_path / "bin"
    stubs.mkdir()
    for name, text in (("python3", PYTHON), ("dpkg", "#!/bin/sh\nexit 0\n"),
                       ("cmake", "#!/bin/sh\nexit 0\n")):
        f = stubs / name
        f.write_text(text)
        f.chmod(f.stat().st_mode | stat.S_IEXEC)
    (tmp_path / "unreachable").write_text(UNREACHABLE)
    (tmp_path / "no_wheel").write_text(NO_WHEEL)
    build = tmp_path / "build"
    build.mkdir()
    (build / "CMakeCache.txt").write_text("PAGEDATTN_CUDA:STRING=OFF\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PAGEDATTN_")}
    env.update(PATH=f"{stubs}:{env['PATH']}", PYTHON=str(stubs / "python3"),
               BUILD_DIR=str(build), JOBS="1", PAGEDATTN_MODEL_TEST="OFF",
               STUB_DIR=str(tmp_path), STUB_CPU=cpu, STUB_PYPI=pypi)
    return subprocess.run(["bash", os.path.join(ROOT, "scripts", "setup.sh")], env=env,
                          capture_output=True, text=True, timeout=120)


def test_cpu_index_unreachable_then_pypi_says_so_without_pips_errors(tmp_path):
    r = _setup(tmp_path, "unreachable", "ok")
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert "ERROR" not in out, out
    assert ("setup: torch's CPU index (download.pytorch.org) is unreachable from here; skipped "
            "it, installing torch from PyPI instead") in out, out
    assert "setup: installed the Python package" in out, out


def test_cpu_index_without_a_wheel_names_the_interpreter(tmp_path):
    r = _setup(tmp_path, "no_wheel", "ok")
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert "ERROR:" not in out, out
    assert ("has no torch wheel for Python 3.99.0 on " in out and
            "(Could not find a version that satisfies the requirement torch" in out), out


def test_cpu_index_works_no_fallback_line(tmp_path):
    r = _setup(tmp_path, "ok", "unreachable")
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert "PyPI" not in out and "ERROR" not in out, out


def test_no_torch_anywhere_stops_with_pips_words_and_what_to_do(tmp_path):
    r = _setup(tmp_path, "unreachable", "no_wheel")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "ERROR: No matching distribution found for torch" in r.stderr, r.stderr
    assert ("setup: torch could not be installed from PyPI either for Python 3.99.0" in r.stderr
            and "PAGEDATTN_TORCH=OFF bash scripts/setup.sh skips it" in r.stderr), r.stderr
    assert "setup: built" not in r.stdout, r.stdout
