KV_TENSORS = 2  # a K and a V vector per KV head


def kv_bytes_per_token(config: dict, bytes_per_value: float) -> int:
    """Bytes of KV cache one token adds, over all layers (config['attention']: 'gqa' or 'mla')."""
    layers = config["num_layers"]
    if config["attention"] == "gqa":
        values = KV_TENSORS * layers * config["num_kv_heads"] * config["head_dim"]
    else:
        values = layers * (config["kv_lora_rank"] + config["qk_rope_head_dim"])
    return round(values * bytes_per_value)
