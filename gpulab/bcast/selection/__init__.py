"""Which algorithm ``bcast(..., algorithm="auto")`` runs.

tuning (the tuning file: measured tables and fitted models), auto (``select``: the decision and its reason;
a machine named by $GPULAB_MACHINE comes through ``gpulab.machines.load``).
"""
