"""pyinfra operations: compare a fact with the wanted state, yield only what differs."""
