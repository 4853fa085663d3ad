"""NATS: connecting to one server or a cluster, the event stream and its replicas, pull
consumers, the request/reply responder, leases and the compiler's checkpoint record."""
