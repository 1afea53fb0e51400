def kv_bytes_per_token(config: dict, bytes_per_value: float) -> int:
    """Bytes of KV cache one token adds, over all layers (config['attention']: 'gqa' or 'mla')."""
    if config["attention"] == "gqa":
        ...  # K and V per KV head per layer
    else:
        ...  # one latent and one rotary key per layer
    raise NotImplementedError
