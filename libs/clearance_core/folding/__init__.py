"""Folding stream events into compiled state: one fold per kind, the model the compiler
keeps, the narrowing of invalidations, and the same folds offline."""
