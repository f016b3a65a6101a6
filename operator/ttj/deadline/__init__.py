"""Finishing by a deadline at the least cost: the online spot/on-demand policy and the job's ETA.

Pure (no Kubernetes, no I/O): the planner asks it how many catch-up (on-demand) workers a job with a deadline
should hold, and the simulator replays measured spot availability through the very same function.
"""
