"""Preemption models shared by the local cluster and the what-if simulator (pure, no Kubernetes)."""
