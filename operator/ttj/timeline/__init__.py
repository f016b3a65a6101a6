"""A job's timeline, as a picture (``ttj timeline -o FILE.png``) or as text: pod lifetimes per slot, chief
epochs, preemptions and what each cost, the global step and the money spent.

``model`` holds the timeline, ``cluster`` rebuilds one from what the cluster keeps, ``text`` and ``draw``
render it (``draw`` needs matplotlib, the ``viz`` extra), ``cli`` is the command.
"""
