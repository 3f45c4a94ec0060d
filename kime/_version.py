"""The package version, on its own so any module can read it without importing `kime`."""
__version__ = "0.1.0"
