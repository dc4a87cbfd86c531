"""The profile store: the HDF5 format, lookups, residuals and error bands, GPU spec files, nccl-
tests tables and analytic store generation.

A new store field or a new measured-table layout goes here. It never imports the simulator
(:mod:`core.sim`).
"""
