"""The PaddlePaddle backend: backend.py (`Backend`), resnet.py (ResNet-50 v1.5 in paddle.nn), bert.py (BERT
pretraining in paddle.nn, Paddle's optimizers), data.py (the real-data input pipelines). Nothing is imported here:
each module imports Paddle itself."""
