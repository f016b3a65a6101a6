"""The embedded local cluster: a real-HTTP Kubernetes API server plus simulated nodes, run in-process."""
