"""The plan record and its rules: model, parallel plan, cluster and cost configuration, field
metadata, validation, presets and GPU kinds.

A change to what a session holds (a new field, a new rule between fields) goes here. It imports
only :mod:`core.util`.
"""
