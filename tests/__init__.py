"""Suanli's test suites: a package, so suites import shared helpers as ``tests.<suite>.<module>``."""
