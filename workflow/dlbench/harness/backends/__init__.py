"""One package per framework, backends/<framework>/ with the same modules: backend.py (`Backend`), resnet.py,
bert.py, data.py (see pytorch/backend.py for the interface)."""
