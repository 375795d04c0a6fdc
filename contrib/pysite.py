"""Prints where the Python package goes, relative to the install prefix, so
that the interpreter running this finds it under the default prefix
(Debian: lib/python3.X/dist-packages below /usr/local). Used by configure."""
import sys
import sysconfig

p = sysconfig.get_path("purelib")
for base in ("/usr/local", sys.prefix):
    if p.startswith(base + "/"):
        print(p[len(base) + 1:])
        break
else:
    print("lib/python%d.%d/site-packages" % sys.version_info[:2])
