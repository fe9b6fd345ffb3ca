"""vlaunch: size, launch and verify vLLM servers."""

__version__ = "0.1.0"
