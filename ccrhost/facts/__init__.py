"""pyinfra facts: read node state in as few remote commands as possible."""
