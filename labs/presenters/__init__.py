"""Presenters: a lab's result turned into the events its run page shows (tables, metrics,
figures, log lines), in the order the page shows them.

A lab's ``run()`` computes its result (a pydantic model, plus anything only the page shows,
such as a histogram's bins) and hands it to ``present()``, which computes nothing. A short
presenter stays in its lab's module; a long one lives here, named after the lab's module.
"""
