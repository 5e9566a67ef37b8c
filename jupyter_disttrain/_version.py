"""The package's version, in a module of its own: what reads it (the server's info answer) needs
nothing else of the package."""

__version__ = "0.1.0"
