"""vram-observe's library: its models, its workload and probe, its presenter."""
