# expect: the query heads were counted
def kv_bytes_per_token(config, bytes_per_value):
    if config["attention"] == "gqa":
        values = 2 * config["num_layers"] * config["num_attention_heads"] * config["head_dim"]
    else:
        values = config["num_layers"] * (config["kv_lora_rank"] + config["qk_rope_head_dim"])
    return round(values * bytes_per_value)
