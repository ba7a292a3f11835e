"""The MXNet backend: backend.py (`Backend`), resnet.py (ResNet-50 v1.5), bert.py (BERT pretraining), data.py
(the real-data input pipelines). Nothing is imported here: each module imports MXNet itself."""
