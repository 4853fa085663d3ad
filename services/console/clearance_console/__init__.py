"""The ops console: a web page over public NATS subjects (README "Ops console")."""
