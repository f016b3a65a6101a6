"""ttj: a Kubernetes operator for distributed TensorFlow training on spot/preemptible GPUs."""

__version__ = "0.1.0"
