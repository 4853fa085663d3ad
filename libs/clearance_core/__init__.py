"""Clearance's pure core: the wire contract, the policy model, compilation and evaluation.

Nothing in this package performs I/O (enforced by import-linter): every function takes
its inputs as values and returns values, so the same code runs in the compiler, the
decision service and the unit tests.
"""
