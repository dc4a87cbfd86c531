"""The model's arithmetic: layer spec and families, parameter and FLOP counts, activation and state
memory, the operations of a layer and their profile keys.

A new model family or layer component (attention kind, MLP kind, norm) goes here. It imports
:mod:`core.plan`, :mod:`core.schedules` and :mod:`core.util`.
"""
