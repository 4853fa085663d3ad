"""Valkey: the client factory, the key layout, the compiler's writes and commits, the
stored families, the decision cache and its invalidation, the Lua script library and the
high-water mark of what was read."""
