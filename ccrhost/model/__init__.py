"""Pure domain model: no I/O."""
