"""The kopf side of the operator: observe (indexes), plan (ttj.planner), apply, write status, emit events."""
