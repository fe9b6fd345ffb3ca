"""torchvision stand-in for scripts/quant_oracle.py (see _stub.py)."""

from torchvision._stub import module_getattr as __getattr__  # noqa: F401

__version__ = "0.0.0"
