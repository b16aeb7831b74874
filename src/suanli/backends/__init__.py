"""Execution backends: where workloads actually run.

``base`` defines the small ``Backend`` protocol the control plane drives (submit,
status, stop, signal, logs, list_running); ``local`` runs processes on this host,
``slurm`` drives a real Slurm cluster. The control plane never knows which one it
talks to beyond the node's ``backend`` name.
"""
