"""Helpers the tests share (``from tests.helpers.<module> import ...``)."""
