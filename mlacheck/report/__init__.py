"""Reporters: each turns a CheckResult into one output format; none of them analyses anything."""
