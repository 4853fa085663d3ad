"""The decision service's read side: its mirror of the compiled state, the snapshot one
question reads, and every read it makes."""
