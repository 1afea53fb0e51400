# expect: the latent was counted twice
def kv_bytes_per_token(config, bytes_per_value):
    layers = config["num_layers"]
    if config["attention"] == "gqa":
        return round(2 * layers * config["num_kv_heads"] * config["head_dim"] * bytes_per_value)
    return round(
        layers * (2 * config["kv_lora_rank"] + config["qk_rope_head_dim"]) * bytes_per_value
    )
