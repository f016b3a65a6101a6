"""The TransientTrainingJob trainer: asynchronous parameter-server TensorFlow training that survives losing its chief.

Run it as ``python -m ttj_trainer``; see trainer-image/README.md for the environment it reads.
"""

import time

__version__ = "0.1.0"

STARTED_AT = time.monotonic()  # for the "first step" log event: how long a joining worker takes to contribute
