"""The decision service: answers checks over NATS request/reply from compiled state."""
