"""The compiler: folds the event stream, in order, into compiled state in Redis."""
