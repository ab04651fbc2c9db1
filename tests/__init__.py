"""Trainguard's test suite (a package so that ``tests.support`` can be imported as a pytest plugin)."""
