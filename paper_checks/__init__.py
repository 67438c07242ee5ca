"""Proof regression suite: every statement of the paper checked by independent routes (see registry.py)."""
