"""Running vLLM: pre-flight, the one-vLLM guard, the launch, its supervisor, the watchdog, Ray clusters."""
