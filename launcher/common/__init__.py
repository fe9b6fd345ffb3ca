"""The shared vocabulary: errors, byte units, safe characters, files, secrets, frozen records."""
