"""Dataset preparation (runs in envs/dataprep.yaml): ImageNet TFRecords and BERT pretraining shards."""
