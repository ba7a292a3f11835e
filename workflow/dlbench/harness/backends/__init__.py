"""One package per framework, backends/<framework>/ with the same modules: backend.py (`Backend`, which fulfils
the contract of base.py), resnet.py, bert.py, data.py. The frameworks are listed in harness/frameworks.py."""
