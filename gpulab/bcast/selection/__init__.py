"""Which algorithm ``bcast(..., algorithm="auto")`` runs.

tuning (the tuning file: measured tables and fitted models), machine_loader (the
machine a name or file names: $GPULAB_MACHINE), auto (``select``: the decision and its reason).
"""
