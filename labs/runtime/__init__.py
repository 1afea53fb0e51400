"""What executes a lab: the sandbox, the forking executor, the warm parent's
preload, the test-only sandbox probes and the terminal runner (``lowbit lab run``).

Nothing here imports ``app``: the database side of runs (store, queue, the worker
loop) is ``app.runs``, which calls ``executor.execute`` for each run.
"""
