"""The gateway: HTTPS interfaces users already have, answered over NATS."""
