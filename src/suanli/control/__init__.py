"""The control plane: lifecycles of instances and jobs, placement through
``suanli.scheduler``, launching on backends, and the reconcile loop.

Routers call the service modules (``instances``, ``jobs``, ``nodes``, ``auth``),
which only read and write the database. All work with side effects outside the
database (starting and stopping processes) happens in ``loop.ControlLoop``, never
inside a database transaction.
"""
