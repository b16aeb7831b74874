"""Suanli (算力): an open, self-hostable GPU compute rental platform."""

__version__ = "0.1.0"
