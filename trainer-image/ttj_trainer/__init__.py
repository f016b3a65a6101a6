"""The TransientTrainingJob trainer: asynchronous parameter-server TensorFlow training that survives losing its chief.

Run it as ``python -m ttj_trainer``; see trainer-image/README.md for the environment it reads.
"""

__version__ = "0.1.0"
