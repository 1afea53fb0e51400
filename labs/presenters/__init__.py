"""Presenters: a lab's result turned into the events a run page shows (tables, metrics,
figures, log lines). A lab's run() computes its result; its presenter never computes.

A lab keeps its presenter in its own module unless that would make the module too long.
"""
