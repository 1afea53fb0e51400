"""How lowbit's results look, written once.

``theme`` (the one palette, the matplotlib rcParams, the one SVG sanitiser), ``charts``
and ``model_charts`` (a lab's matplotlib charts, drawn in the worker), ``tiles`` (the
headline numbers of a run, and numbers written for reading), ``inline`` (the charts the
compare page writes as SVG text: no matplotlib) and ``cards`` (the card figures). No
module here imports a lab or the web app; matplotlib is imported only inside the
functions that draw.
"""
