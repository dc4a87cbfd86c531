"""Measured runs and how well the simulator predicts them: readers of measured runs (a session plus
a measurement), error metrics and calibration of profile stores.

A new source of measurements goes here. The readers never run the simulator.
"""
