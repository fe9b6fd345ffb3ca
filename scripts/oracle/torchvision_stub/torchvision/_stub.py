"""A stand-in for torchvision inside scripts/quant_oracle.py only: every name it is asked for is a class that takes
anything and does nothing. vLLM's multimodal model modules import transformers' image processors, which import
torchvision at module level; building a model on the meta device processes no image."""

from typing import Any


class Dummy:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __call__(self, *args: Any, **kwargs: Any) -> "Dummy":
        return self

    def __getattr__(self, name: str) -> "Dummy":
        if name.startswith("__"):
            raise AttributeError(name)
        return Dummy()


def module_getattr(name: str) -> type[Dummy]:
    if name.startswith("__"):
        raise AttributeError(name)
    return Dummy
