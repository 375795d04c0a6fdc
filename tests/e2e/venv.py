#!/usr/bin/python3
"""`pip install contrib/python` into a virtual environment, the way a training
job in a venv or conda environment gets the package (issue 29):

- a venv (python3 -m venv --system-site-packages: numpy, pyzmq, msgpack,
  h5py and torch are the system's, nothing is downloaded) gets the package
  with pip, offline (--no-build-isolation --no-deps --no-index: the
  interpreter's own setuptools and wheel build it), from a copy of
  contrib/python (pip writes build/ and *.egg-info where it builds, and
  make distcheck's source tree is read-only);
- `import sinkwatch` in the venv comes from the venv's site-packages, not
  from the source tree nor a `make install`;
- its version (sinkwatch.__version__ and pip's metadata) is the one
  configure gave the C programs (`sinkwatch --version`);
- the metadata declare numpy, pyzmq and msgpack, and the extras torch,
  notebook, dashboard and all;
- the venv's interpreter streams a small run to a real sinkwatchd with the
  installed client, and reads it back with the installed reader
  (sinkwatch.open_run, the report library found beside $SINKWATCH): every
  step sent, and the report the command line gives;
- the venv's sinkwatch-dashboard (the package's console entry point) prints
  its help and renders the run to a PNG.

Exit 77 (skipped) when the interpreter cannot make a venv with pip
(Debian: python3-venv, python3-pip; contrib/install-deps.sh installs them).

    SINKWATCHD=./sinkwatchd SINKWATCH=./sinkwatch SW_SRCDIR=. /usr/bin/python3 tests/e2e/venv.py
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from swharness import SINKWATCH, SINKWATCHD, Daemon, Results, asan_runtime  # noqa: E402

SRCDIR = os.environ.get("SW_SRCDIR") or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PKGSRC = os.path.join(SRCDIR, "contrib", "python")
RUN = "venv-run"
LAYERS, HEADS, STEPS = 2, 3, 6

if not SINKWATCHD or not SINKWATCH:
    print("SINKWATCHD and SINKWATCH must be set: skipped")
    sys.exit(77)

# what the venv's interpreter runs: the installed client, a small run
SENDER = r'''
import sys
import numpy as np
import sinkwatch
endpoint, run, layers, heads, steps = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6])
rng = np.random.default_rng(29)
c = sinkwatch.Client(run, layers=layers, heads=heads, endpoint=endpoint, model="venv",
                     linger=10.0)
for step in range(steps):
    for layer in range(layers):
        x = np.exp(rng.normal(size=(heads, 8, 8)))
        x[:, :, 0] *= 20.0
        x = (x / x.sum(axis=-1, keepdims=True)).astype(np.float32)
        assert c.send(step * 10, layer, x) is True
assert c.end() is True
st = c.close()
assert st["dropped"] == 0 and st["sent"] == steps * layers + 1, st
print("sent", st["sent"])
'''


# what the venv's interpreter reads back: sinkwatch.open_run (libsinkwatch-report)
READER = r'''
import json, sys
import sinkwatch
with sinkwatch.open_run(sys.argv[1]) as r:
    print(json.dumps({"module": sinkwatch.__file__, "steps": r.steps.tolist(),
                      "shape": list(r["sink_mass"].shape), "report": r.report(per_head=True)}))
'''


def env_clean():
    """The environment for the venv's programs: no PYTHONPATH (the package
    must come from the venv), pip quiet and offline."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "PIP_REQUIRE_VIRTUALENV")}
    env.update(PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1", PIP_NO_INDEX="1",
               MPLBACKEND="Agg")
    return env


def run(args, timeout=300, **kw):
    p = subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=env_clean(),
                       **kw)
    if p.returncode != 0:
        raise AssertionError("%s: exit %d\n%s%s" % (" ".join(args), p.returncode,
                                                   p.stdout[-3000:], p.stderr[-3000:]))
    return p.stdout


def make_venv(tmp):
    """The venv's directory, or None when this interpreter cannot make one
    with pip (the skip)."""
    venv = os.path.join(tmp, "venv")
    p = subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", venv],
                       capture_output=True, text=True, timeout=300, env=env_clean())
    if p.returncode != 0:
        print("python3 -m venv failed (python3-venv missing?): %s" % p.stderr.strip()[-500:])
        return None
    py = os.path.join(venv, "bin", "python")
    p = subprocess.run([py, "-m", "pip", "--version"], capture_output=True, text=True,
                       timeout=120, env=env_clean())
    if p.returncode != 0:
        print("no pip in the venv (python3-pip missing?): %s" % p.stderr.strip()[-500:])
        return None
    return venv


def main():
    tmp = tempfile.mkdtemp(prefix="sinkwatch-venv-")
    venv = make_venv(tmp)
    if venv is None:
        shutil.rmtree(tmp, ignore_errors=True)
        print("skipped")
        return 77
    py = os.path.join(venv, "bin", "python")
    R = Results()
    live = {}

    def t_install():
        # a copy: pip builds in the tree it installs from
        src = os.path.join(tmp, "src")
        shutil.copytree(PKGSRC, src, ignore=shutil.ignore_patterns(
            "__pycache__", "*.pyc", "build", "*.egg-info"))
        for d in (src, os.path.join(src, "sinkwatch")):
            os.chmod(d, 0o755)
        out = run([py, "-m", "pip", "install", "--no-build-isolation", "--no-deps",
                   "--no-index", src])
        assert "Successfully installed sinkwatch-" in out, out

    def t_import():
        out = run([py, "-c", "import sinkwatch, sys; print(sinkwatch.__file__); "
                   "print(sys.prefix)"], cwd=tmp)
        path, prefix = out.split("\n")[:2]
        assert os.path.realpath(prefix) == os.path.realpath(venv), (prefix, venv)
        site = os.path.realpath(os.path.join(venv, "lib"))
        assert os.path.realpath(path).startswith(site + os.sep) and "site-packages" in path, (
            "sinkwatch imported from %s, not the venv's site-packages" % path)

    def t_version():
        tool = subprocess.run([SINKWATCH, "--version"], capture_output=True, text=True,
                              timeout=30).stdout.split()
        assert tool[:1] == ["sinkwatch"] and len(tool) > 1, tool
        want = tool[1]
        out = run([py, "-c", "import sinkwatch, importlib.metadata as m; "
                   "print(sinkwatch.__version__); print(m.version('sinkwatch'))"], cwd=tmp)
        got = out.split("\n")[:2]
        assert got == [want, want], ("sinkwatch --version says %s, the venv's package %r"
                                     % (want, got))

    def t_metadata():
        out = run([py, "-c", "import importlib.metadata as m; md = m.metadata('sinkwatch'); "
                   "print('\\n'.join(md.get_all('Requires-Dist') or [])); print('--'); "
                   "print('\\n'.join(md.get_all('Provides-Extra') or []))"], cwd=tmp)
        reqs, extras = out.split("--\n")
        plain = {r.split(";")[0].strip() for r in reqs.split("\n")
                 if r.strip() and "extra ==" not in r}
        assert plain == {"numpy", "pyzmq", "msgpack"}, reqs
        ex = set(extras.split())
        assert {"torch", "notebook", "dashboard", "all"} <= ex, ex
        assert any(r.startswith("h5py") and "dashboard" in r for r in reqs.split("\n")), reqs
        for pkg in ("xarray", "pandas"):
            assert any(r.startswith(pkg) and "notebook" in r for r in reqs.split("\n")), reqs

    def t_stream():
        d = Daemon(tmp=tmp).start()
        live["d"] = d
        script = os.path.join(tmp, "sender.py")
        with open(script, "w") as f:
            f.write(SENDER)
        out = run([py, script, d.listen, RUN, str(LAYERS), str(HEADS), str(STEPS)], cwd=tmp,
                  timeout=120)
        assert out.strip() == "sent %d" % (STEPS * LAYERS + 1), out
        path = d.wait_ended(RUN, timeout=30)
        live["path"] = path
        # read back with the venv's reader: the library found beside the
        # sinkwatch tool ($SINKWATCH), its report the command line's
        env = dict(env_clean(), SINKWATCH=os.path.abspath(SINKWATCH))
        env.pop("SINKWATCH_LIB", None)
        rt = asan_runtime()
        if rt:      # an ASan build's library needs its runtime first in the process
            env.update(LD_PRELOAD=rt, ASAN_OPTIONS="detect_leaks=0")
        p = subprocess.run([py, "-c", READER, path], cwd=tmp, env=env, capture_output=True,
                           text=True, timeout=120)
        assert p.returncode == 0, p.stderr[-3000:]
        got = json.loads(p.stdout)
        assert got["module"].startswith(os.path.join(venv, "lib")), got["module"]
        assert got["steps"] == [10 * i for i in range(STEPS)], got["steps"]
        assert got["shape"] == [STEPS, LAYERS, HEADS], got["shape"]
        q = subprocess.run([SINKWATCH, "report", path, "--format", "json", "--per-head"],
                           capture_output=True, text=True, timeout=60)
        assert q.returncode == 0, q.stderr
        assert got["report"] == json.loads(q.stdout), "the venv's report is not the CLI's"

    def t_dashboard():
        dash = os.path.join(venv, "bin", "sinkwatch-dashboard")
        assert os.access(dash, os.X_OK), dash
        out = run([dash, "--help"], cwd=tmp, timeout=120)
        assert out.startswith("usage: sinkwatch-dashboard ") and "--png" in out, out
        if "path" not in live:
            raise AssertionError("no run to render (stream failed)")
        png = os.path.join(tmp, "run.png")
        env = dict(env_clean(), SINKWATCH=SINKWATCH)
        p = subprocess.run([dash, live["path"], "--png", png, "--timeout", "5"], cwd=tmp,
                           env=env, capture_output=True, text=True, timeout=180)
        assert p.returncode == 0, (p.returncode, p.stderr[-2000:])
        with open(png, "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"

    def t_torch():
        # the [torch] extra is the environment's own torch (here the system's,
        # through --system-site-packages); the hook imports against it
        p = subprocess.run([py, "-c", "import torch"], capture_output=True, timeout=180,
                           env=env_clean(), cwd=tmp)
        if p.returncode != 0:
            print("     (no torch: the hook is not imported)")
            return
        run([py, "-c", "import sinkwatch.torch, torch; assert hasattr(sinkwatch.torch, "
             "'distributed_client')"], cwd=tmp, timeout=180)

    try:
        R.check("pip install (offline, a copy)", t_install)
        R.check("import from the venv", t_import)
        R.check("version = sinkwatch --version", t_version)
        R.check("metadata: dependencies, extras", t_metadata)
        R.check("stream a run from the venv", t_stream)
        R.check("venv's sinkwatch-dashboard", t_dashboard)
        R.check("sinkwatch.torch in the venv", t_torch)
    finally:
        if "d" in live:
            live["d"].stop()
        rc = R.finish()
        if rc == 0:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print("kept %s" % tmp)
    return rc


if __name__ == "__main__":
    sys.exit(main())
