"""Studies over many simulations: the plan sweep and its Pareto front, parallel sweeps, the
compute-optimal study, the shared-cluster scheduler, plan diffs and which GPUs to rent (gpu_choice:
a sweep per GPU kind of a price sheet, one front of expected days and dollars).
"""
