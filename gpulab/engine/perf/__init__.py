"""The performance model: how long an iteration takes on a grid shape and a machine, and measuring it.

flops (work per iteration and per rank), volume (bytes per collective per
layer), rings (each collective priced as a ring), machines (the machines the
model prices, from a description of gpulab.machines), terms and predict (the
prediction, the ranking of grid shapes), probes, calibration and
fitted_machine (this computer, measured and fitted), trust (how far a fit
holds), timing (timed iterations of the real engine, MFU), pipeline (the
busiest stage, stage-to-stage sends, micro-batches in flight), compare (each
strategy's best configuration: ``gpulab model compare``), live_plans (each
strategy's best grid on this machine, predicted and run), pick_validation
(does the model pick the grid that measurement confirms?), comm_only
(AxoNN's communication-only ranking), memory_model and wire (``gpulab model
memory``).
"""
