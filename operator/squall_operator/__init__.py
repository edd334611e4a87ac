"""Nimbus: the pure scheduler, lifecycle table and heartbeat monitor, and their I/O shell."""
