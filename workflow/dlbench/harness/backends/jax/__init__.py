"""The JAX backend: backend.py (`Backend`), resnet.py (ResNet-50 v1.5 in Flax), bert.py (BERT pretraining in Flax,
Optax's optimizers), data.py (the real-data input pipelines). Nothing is imported here: each module imports JAX
itself."""
