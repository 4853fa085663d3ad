"""The ops console: a web page over public NATS subjects (docs/guide/console.md)."""
