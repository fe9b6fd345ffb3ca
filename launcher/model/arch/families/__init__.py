"""One module per model family, named after its main model_type.

Each module defines MODEL_TYPES (every model_type it reads), DEFAULTS (transformers' class defaults per
model_type, for the fields it reads) and read(c, meta) -> Model. The registry finds a module by the
model_type's name, or through launcher.model.arch.registry.ALIASES, and imports only the one it needs.
"""
