"""Simulated GKE node pools, the scheduler, the Deployment controller and pods that run as processes.

Everything here is a client of the Kubernetes API (the local API server, or any other).
"""
