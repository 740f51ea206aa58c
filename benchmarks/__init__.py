"""``make bench``: speed and memory of our models side by side with torch.nn.Transformer, JoeyNMT and
OpenNMT-py on the same batches (see :mod:`benchmarks.__main__`)."""
