#!/usr/bin/python3
"""Each list once (issue 28): the lists the C code takes from its X-macro
tables (daemon/drops.def, proto/errors.def, daemon/sections.def,
forward/fwd_sections.def, daemon/sender_counters.def) are the lists the
documents and the Python client write by hand:

- contrib/python/sinkwatch/proto.py's ERRNAMES are errors.def's names, by
  index (index = -code), "ok" first;
- PROTOCOL.md's drop reasons (7a) are drops.def's, and its error names and
  codes (8) are errors.def's: none missing, none extra;
- sinkwatch(1) lists the daemon's status sections (status) and the
  forwarder's (forward): the sets of sections.def and fwd_sections.def;
- the sender counters (sender_counters.def) are columns of the run file's
  sender table under the same names (but pending), and the drop reasons
  they stand for are drop reasons.

Run with SW_SRCDIR (default .) naming the source tree."""
import ast
import os
import re
import sys

SRC = os.environ.get("SW_SRCDIR", ".")


def read(rel):
    with open(os.path.join(SRC, rel), encoding="utf-8") as f:
        return f.read()


def def_entries(rel, macro):
    """The argument lists of a .def file's entries, in order (comments and
    the #undef left out)."""
    text = re.sub(r"/\*.*?\*/", " ", read(rel), flags=re.S)
    text = "\n".join(l for l in text.splitlines() if not l.lstrip().startswith("#"))
    out = []
    for m in re.finditer(r"\b%s\((.*?)\)\s*(?=\b%s\(|$)" % (macro, macro), text, re.S):
        args = [a.strip() for a in re.findall(r'"(?:[^"\\]|\\.)*"|[^,]+', m.group(1))]
        out.append(args)
    assert out, "%s: no %s entries" % (rel, macro)
    return out


passed = failed = 0


def check(name, ok, why=""):
    global passed, failed
    if ok:
        passed += 1
        print("ok   %s" % name)
    else:
        failed += 1
        print("FAIL %s: %s" % (name, why))


def same_set(name, doc, table):
    doc, table = list(doc), list(table)
    dup = sorted({x for x in doc if doc.count(x) > 1})
    missing, extra = sorted(set(table) - set(doc)), sorted(set(doc) - set(table))
    check("%s (%d names)" % (name, len(table)), not missing and not extra and not dup,
          "not in the document: %s; in the document only: %s; twice: %s"
          % (missing, extra, dup))


DROPS = [e[1] for e in def_entries("daemon/drops.def", "SWD_DROP")]
ERRORS = ["ok"] + [e[1] for e in def_entries("proto/errors.def", "SWP_ERROR")]
SECTIONS = [e[0] for e in def_entries("daemon/sections.def", "SWD_SECTION")]
FWD_SECTIONS = [e[0] for e in def_entries("forward/fwd_sections.def", "SW_FWD_SECTION")]
COUNTERS = def_entries("daemon/sender_counters.def", "SWD_SENDER_COUNTER")
for name, names in (("drops.def", DROPS), ("errors.def", ERRORS),
                    ("sections.def", SECTIONS), ("fwd_sections.def", FWD_SECTIONS),
                    ("sender_counters.def", [c[0] for c in COUNTERS])):
    check("%s: names unique" % name, len(set(names)) == len(names), names)


def python_errnames():
    tree = ast.parse(read("contrib/python/sinkwatch/proto.py"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "ERRNAMES" for t in node.targets):
            return list(ast.literal_eval(node.value))
    raise AssertionError("proto.py: no ERRNAMES")


py = python_errnames()
check("proto.py ERRNAMES = errors.def by index", py == ERRORS,
      "proto.py %s, errors.def %s" % (py, ERRORS))


def md_table(text, start):
    """The rows of the first table after the line holding start: lists of
    cells, the header and the |---| line left out."""
    i = text.index(start)
    rows = []
    for line in text[i:].splitlines()[1:]:
        if not line.startswith("|"):
            if rows:
                break
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not all(set(c) <= set("-: ") for c in cells):
            rows.append(cells)
    return rows[1:]


def code_name(cell):
    m = re.fullmatch(r"`([a-z0-9_]+)`", cell)
    assert m, "not a `name`: %r" % cell
    return m.group(1)


proto_md = read("proto/PROTOCOL.md")
same_set("PROTOCOL.md 7a drop reasons = drops.def",
         [code_name(r[0]) for r in md_table(proto_md, "**Drop reasons the receiver counts**")],
         DROPS)
errs = md_table(proto_md, "**Error names and codes**")
same_set("PROTOCOL.md 8 error names = errors.def", [code_name(r[1]) for r in errs], ERRORS)
bad_codes = [(r[0], r[1]) for r in errs
             if code_name(r[1]) in ERRORS and int(r[0]) != -ERRORS.index(code_name(r[1]))]
check("PROTOCOL.md 8 error codes = errors.def's", not bad_codes, bad_codes)


def man_sections(page, subsection, lead):
    """The section names a man page's subsection lists after lead: "a, b, c
    and d" up to the first '.', ':' or ';'."""
    text = page.split(".SS %s\n" % subsection, 1)[1].split("\n.SS ", 1)[0]
    text = re.sub(r"\s+", " ", re.sub(r"^\.[A-Z]+ ?", "", text, flags=re.M))
    m = re.search(re.escape(lead) + r"\s*([a-z_, ]+?)\s*[.:;]", text)
    assert m, "sinkwatch(1) %s: no '%s' list" % (subsection, lead)
    return [n.strip() for n in re.split(r",| and ", m.group(1)) if n.strip()]


man = read("doc/sinkwatch.1")
same_set("sinkwatch(1) status: the daemon's sections = sections.def",
         man_sections(man, "status", "for its status, in sections:"), SECTIONS)
same_set("sinkwatch(1) forward: the forwarder's sections = fwd_sections.def",
         man_sections(man, "forward", "with the sections"), FWD_SECTIONS)

# the run file's sender table holds the counters under their names (runfile.h)
m = re.search(r"#define SW_SENDER_FIELD_LIST((?:\s*\"[^\"]*\"\s*\\?)+)", read("storage/runfile.h"))
fields = "".join(re.findall(r'"([^"]*)"', m.group(1))).split(",")
notin = [c[0] for c in COUNTERS if c[0] != "pending" and c[0] not in fields]
check("sender counters are run file sender fields (but pending)", not notin, notin)
bad = [c for c in COUNTERS if c[1] not in ("S64", "U64", "INT") or
       (c[2], c[3] == "NONE") not in (("OWN", True), ("DROP", False)) or
       (c[2] == "DROP" and c[3] not in [e[0] for e in def_entries("daemon/drops.def", "SWD_DROP")])]
check("sender_counters.def: types, OWN/NONE, DROP/reason", not bad, bad)

print("%d passed, %d failed" % (passed, failed))
sys.exit(1 if failed else 0)
