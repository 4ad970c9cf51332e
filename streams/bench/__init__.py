"""Benchmarks (``loopwarden bench ...``): numbers for the notes, never assertions in the suite."""
