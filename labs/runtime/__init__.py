"""The lab runtime: queue, run records, the warm sandboxed worker and the CLI.

Importing this package (or ``queue``, ``runs``, ``forms``, ``views``) imports no
torch: the web process uses those to validate, store and stream runs. Only the
worker (``worker``, ``executor``, ``sandbox``) loads the numeric stack.
"""
