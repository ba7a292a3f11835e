"""One module per framework, each defining `Backend` (see pytorch.py for the interface)."""
