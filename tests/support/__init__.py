"""Helpers shared by the tests: real processes (see procs.py)."""
