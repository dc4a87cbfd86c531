"""Studies over many simulations: the plan sweep and its Pareto front, parallel sweeps, the
compute-optimal study, the shared-cluster scheduler and plan diffs.
"""
