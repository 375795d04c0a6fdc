"""Read run files from Python with the numbers `sinkwatch report` gives.

    import sinkwatch
    run = sinkwatch.open_run("data/tiny.h5")
    rep = run.report(per_head=True)          # = sinkwatch report FILE --format json --per-head
    rep["model_attribution"]["path"]         # dH, sink, content, shares (the paired split)
    run["sink_mass"]                         # [step, layer, head] over the view
    run.to_xarray()                          # an xarray.Dataset (dims step, layer, head)

Nothing here defines a rule. The view (storage/LAYOUT.md: resumes, the
newest incarnation wins, step order), the split (METRICS.md section 3,
paired where the file has row statistics) and the report's JSON are the C
report library's, libsinkwatch-report (sinkwatch/reader.h), loaded with
ctypes: a report read here is the command line's document, key for key and
number for number. The library is looked for in $SINKWATCH_LIB (the file,
or a directory holding it), beside the `sinkwatch` tool on PATH (its
prefix's lib/, or a build tree's report/.libs/), above this package (a
prefix install, or the source tree the package is imported from), then
where the dynamic linker looks.

The core needs numpy and the library; xarray and pandas only for
to_xarray() and Runs.to_dataframe().
"""
import ctypes
import ctypes.util
import json
import os
import shutil
import sys

import numpy as np

__all__ = ["open_run", "open_runs", "Run", "Runs", "ReaderError", "library"]

SONAME = "libsinkwatch-report.so.0"
ABI = 1
_lib = None
_open = {}      # (st_dev, st_ino) of the files a Run holds open in this process: HDF5
                # shares an open file, and a second reader of it reads wrong


class ReaderError(Exception):
    """A run file that cannot be read, or a report the command line refuses
    (the message is the command line's). report: the document, where the
    command line prints one and fails (no run to compare), else None."""

    def __init__(self, msg, report=None):
        super().__init__(msg)
        self.report = report


def _candidates():
    env = os.environ.get("SINKWATCH_LIB")
    if env:
        yield os.path.join(env, SONAME) if os.path.isdir(env) else env
        return
    tool = os.environ.get("SINKWATCH", "sinkwatch")
    if os.path.isdir(tool):     # the directory of the tool (a build tree, PREFIX/bin)
        tool = os.path.join(tool, "sinkwatch")
    tool = shutil.which(tool)
    if tool:
        d = os.path.dirname(os.path.realpath(tool))
        for rel in ("report/.libs", "../lib", "../lib64", "../lib/x86_64-linux-gnu", ".libs"):
            yield os.path.join(d, rel, SONAME)
    here = os.path.dirname(os.path.abspath(__file__))
    up = here
    for _ in range(5):      # PREFIX/lib/python3/dist-packages/sinkwatch; srcdir/contrib/python/sinkwatch
        up = os.path.dirname(up)
        yield os.path.join(up, "lib", SONAME)
        yield os.path.join(up, "report", ".libs", SONAME)
    yield os.path.join(sys.prefix, "lib", SONAME)
    yield os.path.join("/usr/local/lib", SONAME)     # make install's default prefix
    found = ctypes.util.find_library("sinkwatch-report")
    if found:
        yield found
    yield SONAME            # the dynamic linker's own search


def library():
    """The loaded libsinkwatch-report (a ctypes.PyDLL), found once."""
    global _lib
    if _lib is not None:
        return _lib
    tried = []
    for path in _candidates():
        if os.sep in path and not os.path.exists(path):
            tried.append("%s (no such file)" % path)
            continue
        try:
            # PyDLL: the GIL is held through every call. The library calls
            # HDF5, which Debian builds without thread safety: one call at a
            # time in the process, h5py's (which holds the GIL too) included
            lib = ctypes.PyDLL(path)
        except OSError as e:
            tried.append("%s (%s)" % (path, e))
            continue
        _declare(lib)
        if lib.swr_abi() != ABI:
            tried.append("%s (interface %d, this package needs %d)" % (path, lib.swr_abi(), ABI))
            continue
        _lib = lib
        return lib
    env = os.environ.get("SINKWATCH_LIB")
    if env:
        raise ReaderError("SINKWATCH_LIB=%s: not the library %s (or a directory holding it): %s"
                          % (env, SONAME, "; ".join(tried)))
    raise ReaderError("the report library %s was not found. It is built with sinkwatch "
                      "(report/.libs/ of the build tree) and installed by `make install`: put "
                      "the sinkwatch tool on PATH or name it in SINKWATCH, or set SINKWATCH_LIB "
                      "to the library or its directory. Looked in: %s" % (SONAME, "; ".join(tried)))


def _declare(lib):
    c = ctypes
    P, I64, ERR = c.c_void_p, c.c_int64, (c.c_char_p, c.c_size_t)
    sig = {
        "swr_abi": (c.c_int, ()),
        "swr_version": (c.c_char_p, ()),
        "swr_open": (P, (c.c_char_p,) + ERR),
        "swr_close": (None, (P,)),
        "swr_refresh": (c.c_int, (P,) + ERR),
        "swr_info_json": (P, (P,) + ERR),
        "swr_steps": (I64, (P,)),
        "swr_rows": (I64, (P,)),
        "swr_view": (c.c_int, (P, P, P, P, I64)),
        "swr_row_inc": (c.c_int, (P, P, I64)),
        "swr_series": (P, (P, c.c_char_p, c.c_int, c.POINTER(I64)) + ERR),
        "swr_report_json": (P, (P, c.c_int, I64, c.c_int, I64, c.c_int, I64, c.c_int, c.c_int,
                                c.c_int, c.c_double) + ERR),
        "swr_report_many_json": (P, (c.POINTER(c.c_char_p), c.c_size_t, c.c_int, I64, c.c_int,
                                     I64, c.c_int, I64, c.c_int, c.c_int, c.c_double, c.c_char_p,
                                     c.POINTER(c.c_char_p), c.c_size_t) + ERR),
        "swr_free": (None, (P,)),
    }
    for name, (res, args) in sig.items():
        f = getattr(lib, name)
        f.restype, f.argtypes = res, list(args)


def _err():
    return ctypes.create_string_buffer(1024)


def _text(lib, ptr, err):
    """The malloc'd string ptr as str (freed), or ReaderError with err."""
    if not ptr:
        raise ReaderError(err.value.decode("utf-8", "replace"))
    try:
        return ctypes.string_at(ptr).decode("utf-8")
    finally:
        lib.swr_free(ptr)


def _range_args(from_, to, last):
    for name, v in (("from_", from_), ("to", to), ("last", last)):
        if v is not None and (isinstance(v, bool) or int(v) != v):
            raise ValueError("%s: %r is not a step number" % (name, v))
    return (from_ is not None, int(from_ or 0), to is not None, int(to or 0), last is not None,
            int(last or 0))


def _eps(eps):
    return float("nan") if eps is None else float(eps)


def _dim_names(dims):
    """The xarray dims of a series: step first; a repeated dim gets a 2."""
    out = []
    for d in dims.split(","):
        out.append(d + "2" if d in out else d)
    return out


_INT_TYPES = {"int64": np.int64, "uint64": np.uint64, "int32": np.int32, "uint32": np.uint32,
              "uint8": np.uint8, "int8": np.int8}


def _file_key(path):
    try:
        st = os.stat(path)
    except OSError:
        return None     # swr_open says why
    return (st.st_dev, st.st_ino)


class Run:
    """An open run file (SWMR: a daemon may be writing it). Use as a
    context manager, or close() it; one Run per file at a time in a process,
    used by one thread at a time (each library call holds the GIL, so calls
    from several threads, h5py's too, never run inside HDF5 at once)."""

    def __init__(self, path):
        self._lib = library()
        self.path = os.fspath(path)
        self._h = None
        key = _file_key(self.path)
        if key in _open:
            raise ReaderError("%s: already open in this process (%r): one Run per file at a "
                              "time; close() it first" % (self.path, _open[key]))
        err = _err()
        self._h = self._lib.swr_open(os.fsencode(self.path), err, len(err))
        if not self._h:
            raise ReaderError(err.value.decode("utf-8", "replace"))
        self._key = key
        _open[key] = "<sinkwatch.Run %s>" % self.path
        self._load()

    def _load(self):
        err = _err()
        self.info = json.loads(_text(self._lib, self._lib.swr_info_json(self._h, err, len(err)),
                                     err))
        self._fields = {f["name"]: f for f in self.info["fields"]}
        n = self._lib.swr_steps(self._h)
        self.steps = np.zeros(n, np.int64)
        self.rows = np.zeros(n, np.int64)
        self.inc = np.zeros(n, np.uint64)
        if self._lib.swr_view(self._h, self.steps.ctypes.data, self.rows.ctypes.data,
                              self.inc.ctypes.data, n) != 0:
            raise ReaderError("%s: the view changed while read" % self.path)
        self._cache = {}

    def _handle(self):
        if not self._h:
            raise ReaderError("%s: the Run is closed" % self.path)
        return self._h

    # ---- the run -----------------------------------------------------------------
    @property
    def fields(self):
        """The series the file holds (names), in LAYOUT.md's order."""
        return list(self._fields)

    @property
    def layers(self):
        return self.info["layers"]

    @property
    def heads(self):
        return self.info["heads"]

    def refresh(self):
        """Reads what a writer committed since the open or the last refresh
        (LAYOUT.md's reader rules). True when rows were added: the view,
        info and every array are read again."""
        err = _err()
        rc = self._lib.swr_refresh(self._handle(), err, len(err))
        if rc < 0:
            raise ReaderError(err.value.decode("utf-8", "replace"))
        if rc > 0:
            self._load()
        return rc > 0

    def field(self, name, view=True):
        """Series name as an array: over the view [step, layer, head, ...]
        (step order, one winning row per stored step: run.steps), or with
        view=False every committed row as stored. Integer series come back
        as integers; `inc` exactly (uint64)."""
        key = (name, bool(view))
        if key in self._cache:
            return self._cache[key]
        f = self._fields.get(name)
        if f is None:
            raise KeyError("%s has no series %r (it has: %s)" % (self.path, name,
                                                                 ", ".join(self._fields)))
        if name == "inc":
            if view:
                a = self.inc.copy()
            else:
                a = np.zeros(self._lib.swr_rows(self._handle()), np.uint64)
                self._lib.swr_row_inc(self._handle(), a.ctypes.data, len(a))
        else:
            err, count = _err(), ctypes.c_int64(0)
            ptr = self._lib.swr_series(self._handle(), name.encode(), int(bool(view)),
                                       ctypes.byref(count), err, len(err))
            if not ptr:
                raise ReaderError(err.value.decode("utf-8", "replace"))
            try:
                a = np.ctypeslib.as_array(ctypes.cast(ptr, ctypes.POINTER(ctypes.c_double)),
                                          shape=(count.value,)).copy() if count.value else \
                    np.zeros(0)
            finally:
                self._lib.swr_free(ptr)
            n = len(self.steps) if view else self._lib.swr_rows(self._handle())
            a = a.reshape([n] + list(f["shape"]))
            t = _INT_TYPES.get(f["type"])
            if t is not None:
                a = a.astype(t)
        a.setflags(write=False)
        self._cache[key] = a
        return a

    def __getitem__(self, name):
        return self.field(name)

    def __contains__(self, name):
        return name in self._fields

    # ---- what the command line says ----------------------------------------------------
    def report(self, from_=None, to=None, last=None, per_layer=False, per_head=False,
               series=False, eps=None):
        """`sinkwatch report FILE --format json` with the same options, as a
        dict (JSON's null is None): the same keys and numbers."""
        err = _err()
        ptr = self._lib.swr_report_json(self._handle(), *_range_args(from_, to, last), int(per_layer),
                                        int(per_head), int(series), _eps(eps), err, len(err))
        return json.loads(_text(self._lib, ptr, err))

    def series(self, from_=None, to=None, last=None):
        """The report's series (`--series`): per layer and the model, each
        key an array over the range's steps (NaN where JSON says null)."""
        rep = self.report(from_=from_, to=to, last=last, series=True)["series"]
        out = {"step": np.array(rep["step"], np.int64), "layers": []}
        for lay in rep["layers"]:
            out["layers"].append({k: (v if k == "layer" else
                                      np.array([np.nan if x is None else x for x in v], float))
                                  for k, v in lay.items()})
        return out

    def to_xarray(self, fields=None):
        """The view as an xarray.Dataset: every series (or those named) with
        its dims (step, layer, head, ...); coords step, and the stored row
        (stored_row) and incarnation (inc) each step was taken from."""
        import xarray as xr
        data = {}
        for name in fields or self.fields:
            if name in ("step", "inc"):     # coords
                continue
            data[name] = (_dim_names(self._fields[name]["dims"]), self.field(name))
        coords = {"step": self.steps, "stored_row": ("step", self.rows),
                  "inc": ("step", self.inc)}
        attrs = {k: v for k, v in self.info.items() if isinstance(v, (str, int, float, bool))}
        return xr.Dataset(data, coords=coords, attrs=attrs)

    def close(self):
        if getattr(self, "_h", None):
            self._lib.swr_close(self._h)
            self._h = None
            _open.pop(self._key, None)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:   # interpreter shutdown
            pass

    def __repr__(self):
        return "<sinkwatch.Run %s: %s, %d steps, %d layers x %d heads>" % (
            self.path, self.info["run"], len(self.steps), self.layers, self.heads)


class Runs:
    """Several run files, or directories of them: `sinkwatch report
    PATH...`'s comparison of runs."""

    def __init__(self, paths):
        if isinstance(paths, (str, bytes, os.PathLike)):
            paths = [paths]
        self.paths = [os.fspath(p) for p in paths]
        self._lib = library()

    def report(self, from_=None, to=None, last=None, per_layer=False, per_head=False, eps=None,
               group_by=None, exclude=()):
        """`sinkwatch report PATH... --format json`: the compared runs, their
        groups, and the files not compared with the reason. group_by: the
        --group-by keys ("model,params,dir" or a list); exclude: run-id
        patterns (fnmatch), as --exclude."""
        arr = (ctypes.c_char_p * len(self.paths))(*[os.fsencode(p) for p in self.paths])
        if isinstance(exclude, (str, bytes)):
            exclude = [exclude]
        ex = (ctypes.c_char_p * max(1, len(exclude)))(*[os.fsencode(p) for p in exclude])
        if group_by is not None and not isinstance(group_by, str):
            group_by = ",".join(group_by)
        err = _err()
        ptr = self._lib.swr_report_many_json(arr, len(self.paths), *_range_args(from_, to, last),
                                             int(per_layer), int(per_head), _eps(eps),
                                             None if group_by is None else group_by.encode(),
                                             ex, len(exclude), err, len(err))
        rep = json.loads(_text(self._lib, ptr, err))
        for e in rep.get("excluded", []) + rep.get("skipped", []):
            key = _file_key(e["file"])
            if key is not None and key in _open:    # the library's reason is HDF5's
                e["reason"] = "open in this process (%s): close it to compare it" % _open[key]
        if not rep["runs"]:     # the command line fails here (exit 2), its table printed
            why = ["%s: %s" % (e["file"], e["reason"]) for e in rep.get("excluded", []) +
                   rep.get("skipped", [])]
            raise ReaderError("no run to compare (%d file%s not compared, %d skipped)%s" % (
                len(rep.get("excluded", [])), "" if len(rep.get("excluded", [])) == 1 else "s",
                len(rep.get("skipped", [])), (": " + "; ".join(why[:8])) if why else ""),
                report=rep)
        return rep

    def files(self):
        """The run files compared (the report's order: by params)."""
        return [r["file"] for r in self.report()["runs"]]

    def open(self):
        """Each compared run, opened (close them, or use each in a with)."""
        return [Run(f) for f in self.files()]

    def to_dataframe(self, from_=None, to=None, last=None, group_by=None, exclude=()):
        """The cross-run table as a pandas DataFrame: a row per compared
        run, its identity, its group (the index into the report's groups,
        by group_by's keys; None for a run alone, which the report lists in
        no group) and the model's path and endpoint splits.
        df.attrs["not_compared"]: {file: reason} of the runs left out."""
        import pandas as pd
        rows = []
        rep = self.report(from_=from_, to=to, last=last, group_by=group_by, exclude=exclude)
        group = {f: k for k, g in enumerate(rep["groups"]) for f in g["files"]}
        for r in rep["runs"]:
            row = {k: r[k] for k in ("file", "run", "model", "params", "layers", "heads", "kind",
                                     "split_form", "first_step", "last_step", "steps_used",
                                     "lost", "incomplete", "ended", "sink_mass_first",
                                     "sink_mass_last") if k in r}
            row["group"] = group.get(r["file"])
            for form in ("path", "endpoint"):
                for k, v in r["model_attribution"][form].items():
                    row["%s_%s" % (form, k)] = np.nan if v is None else v
            rows.append(row)
        df = pd.DataFrame(rows)
        df.attrs["group_by"] = rep.get("group_by")
        df.attrs["not_compared"] = {e["file"]: e["reason"] for e in rep.get("excluded", [])}
        return df


def open_run(path):
    """The run file at path (a Run)."""
    return Run(path)


def open_runs(paths):
    """Run files, or directories of them (a Runs)."""
    return Runs(paths)
