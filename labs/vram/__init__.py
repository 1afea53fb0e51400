"""vram-observe's library: its parameters and result models, its workload and probe.

The lab itself is ``labs.vram_observe``; its presenter is ``labs.presenters.vram_observe``.
"""
