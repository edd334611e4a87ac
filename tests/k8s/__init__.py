"""Kubernetes test control plane and process kubelet (see docs/testing.md)."""
