"""The version of sinkwatch, written once: configure.ac reads it
(AC_INIT), pyproject.toml reads it (setuptools' dynamic version), and so
does sinkwatch.__version__. Change it here, then autoreconf. Only the one
line below: configure.ac takes the text between its quotes."""
__version__ = "0.1.0"
