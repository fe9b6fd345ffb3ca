"""The model: config.json to layers (`arch/`), parameters, weight formats, KV bytes, checkpoints on disk."""
