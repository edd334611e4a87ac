"""Squall: Apache Storm's model in Python. The SDK users write spouts and bolts with."""
