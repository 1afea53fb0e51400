"""The database side of lab runs, for the web app and the worker.

- ``store``: runs as the learner sees them: creation with quotas, reads, cancel,
  queue places, live workers, the API's JSON.
- ``claims``: the worker's writes: claim, events, finish, heartbeats, the reaper.
- ``queue``: the huey glue (run ids only; the database is the truth).
- ``worker``: ``lowbit worker``, a database client that hands each run to the
  sandboxed executor in ``labs.runtime``.
- ``catalog``: which labs this deployment offers.
- ``forms``, ``views``: form fields from a lab's parameters; value formatting,
  diffs and the server-sent event wire format for run pages.
- ``service``: what the routers call: start a run, the context of a run page.

Nothing here but ``worker`` imports torch, and that only through the executor.
"""
