#!/bin/sh
# make install into a temporary root (DESTDIR): the programs run from there with no
# LD_LIBRARY_PATH, pkg-config --cflags libsinkwatch prints only what the
# public header needs, a program built with pkg-config's flags against the
# installed library links, the unit file names the installed daemon,
# make install says where the Python package went, and the installed
# sinkwatch-dashboard runs the installed package with no PYTHONPATH, and the
# installed reader reads a run with the installed report library.
set -eu
top=${abs_top_builddir:-$(pwd)}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
log="$tmp/install.log"
${MAKE:-make} -C "$top" install DESTDIR="$tmp/root" > "$log" 2>&1 || { cat "$log"; exit 1; }
conf_prefix=$(sed -n 's/^prefix=//p' "$top/client/libsinkwatch.pc")
prefix="$tmp/root$conf_prefix"
unset LD_LIBRARY_PATH
"$prefix/sbin/sinkwatchd" --version | grep -q '^sinkwatchd ' || { echo "sinkwatchd does not run"; exit 1; }
"$prefix/bin/sinkwatch" --help > /dev/null 2>&1 || "$prefix/bin/sinkwatch" help > /dev/null 2>&1 ||
	{ echo "sinkwatch does not run"; exit 1; }
for p in sbin/sinkwatchd bin/sinkwatch; do
	if ldd "$prefix/$p" | grep -q 'not found'; then
		echo "$p: a library is not found:"; ldd "$prefix/$p"; exit 1
	fi
done
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$tmp/root"
cflags=$(pkg-config --cflags libsinkwatch | sed 's/ *$//')
[ "$cflags" = "-I$prefix/include" ] || { echo "pkg-config --cflags: '$cflags'"; exit 1; }
pkg-config --libs --static libsinkwatch | grep -q -- '-lzmq' ||
	{ echo "pkg-config --static lacks -lzmq"; exit 1; }
cat > "$tmp/t.c" <<'C'
#include <sinkwatch/client.h>
#include <stdio.h>
int main(void) { printf("%s\n", sw_strerror(SW_EINVAL)); return 0; }
C
# an --enable-asan library needs its program built with the same sanitizers
# (configure's SW_SAN_CFLAGS), or the runtime does not come first
${CC:-cc} ${SW_SAN_CFLAGS:-} "$tmp/t.c" -o "$tmp/t" $cflags $(pkg-config --libs libsinkwatch) -Wl,-rpath,"$prefix/lib"
"$tmp/t" > /dev/null || { echo "a program linked with pkg-config's flags does not run"; exit 1; }
grep -q "^ExecStart=$conf_prefix/sbin/sinkwatchd " "$prefix/lib/systemd/system/sinkwatchd.service" ||
	{ echo "the unit does not name the installed daemon"; exit 1; }
grep -q "sinkwatch: the Python package is in $prefix/" "$log" ||
	{ echo "make install does not say where the Python package went"; cat "$log"; exit 1; }
pkgdir=$(sed -n 's/^sinkwatch: the Python package is in //p' "$log" | sed "s|^$tmp/root||; s|/sinkwatch\$||")
if ${PYTHON:-python3} -c "import sys; sys.exit(0 if '$pkgdir' in sys.path else 1)"; then
	! grep -q "export PYTHONPATH" "$log" || { echo "a PYTHONPATH line the interpreter does not need"; exit 1; }
else
	grep -q "export PYTHONPATH=$pkgdir\$" "$log" ||
		{ echo "make install does not give the PYTHONPATH line"; exit 1; }
fi
# bin/sinkwatch-dashboard runs the package make install put in $pkgdir, with
# no PYTHONPATH, from any directory: the one under DESTDIR (sys.path says where
# the dashboard module was imported from)
dash="$prefix/bin/sinkwatch-dashboard"
head -n 1 "$dash" | grep -q '^#!/' || { echo "$dash: no #! line"; exit 1; }
out=$(cd "$tmp" && env -u PYTHONPATH MPLBACKEND=Agg PYTHONVERBOSE=1 "$dash" --help 2>"$tmp/dash.err") ||
	{ echo "$dash --help failed:"; tail -n 20 "$tmp/dash.err"; exit 1; }
echo "$out" | grep -q '^usage: sinkwatch-dashboard ' || { echo "$dash --help: '$out'"; exit 1; }
grep -q "$tmp/root$pkgdir/sinkwatch/dashboard.py" "$tmp/dash.err" ||
	{ echo "$dash did not import the installed package ($tmp/root$pkgdir)"; exit 1; }
# the installed reader (sinkwatch.open_run) finds the installed report
# library above its package, with no SINKWATCH_LIB, no tool on PATH, and
# its header is installed
[ -f "$prefix/include/sinkwatch/reader.h" ] || { echo "sinkwatch/reader.h not installed"; exit 1; }
golden="${SW_SRCDIR:-$top}/tests/data/golden_run/golden.h5"
case "${SW_SAN_CFLAGS:-}" in
*address*)	# the interpreter would need the ASan runtime first: reader.py checks that
	echo "ok: installed under $prefix (the installed reader is not run in a sanitizer build)"
	exit 0 ;;
esac
out=$(cd "$tmp" && env -u SINKWATCH_LIB -u SINKWATCH PATH=/usr/bin:/bin PYTHONPATH="$tmp/root$pkgdir" \
	${PYTHON:-python3} -c "
import sys, sinkwatch
r = sinkwatch.open_run(sys.argv[1])
print(sinkwatch.reader.library()._name, r.report()['steps_stored'])" "$golden" 2>&1) ||
	{ echo "the installed reader failed: $out"; exit 1; }
case "$out" in
"$prefix/lib/libsinkwatch-report.so.0 9") ;;
*) echo "the installed reader: '$out' (want the installed library, 9 steps)"; exit 1 ;;
esac
echo "ok: installed under $prefix, programs run, pkg-config cflags '$cflags', sinkwatch-dashboard runs"
