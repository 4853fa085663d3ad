"""The cache-invalidator: removes exactly the cached decisions each change can affect."""
