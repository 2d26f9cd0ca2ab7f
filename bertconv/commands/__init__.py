"""One module per CLI command; each defines `command`."""
