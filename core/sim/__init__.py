"""The simulator: execution graph of one iteration, stage times, communication, the critical-path
solver, the sweep's fast path, costing, reliability (goodput, energy) and the report.

:func:`core.sim.simulate.simulate` is the one entry point: session in, result out.
"""
