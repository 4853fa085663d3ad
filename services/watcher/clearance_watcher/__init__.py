"""The watcher: turns Kubernetes objects (from an API server or a manifest directory)
into events on the ``CLEARANCE_EVENTS`` stream."""
