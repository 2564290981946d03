"""Baton: hands off tool-runtime generations one at a time under a per-runtime Lease."""
