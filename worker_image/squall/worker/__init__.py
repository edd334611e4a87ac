"""The worker process: executors, receive/transfer loops, refresh loops and heartbeats."""
