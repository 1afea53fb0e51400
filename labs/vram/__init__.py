"""vram-observe's library: its parameters and result models, its workload and probe.

The lab itself is the package ``labs.vram_observe`` (its page: ``labs.vram_observe.present``).
"""
