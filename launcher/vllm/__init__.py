"""What vLLM does, in one package: its version rules, its cache spec per layer kind, how it groups layers into
a pool of blocks, and the log lines it prints. Each rule sits once, next to the vLLM source or log line it
comes from; the rest of vlaunch asks this package instead of comparing versions itself.
"""
