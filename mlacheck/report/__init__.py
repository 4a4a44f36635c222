"""Reporters: the terminal report reads the analysis; every file format reads the JSON report dict.
None of them analyses anything."""
