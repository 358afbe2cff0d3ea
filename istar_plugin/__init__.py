"""istar_plugin: I-STAR and isotropy measures for fine-tuning BERT-family encoders.

Importing it before torch turns on PyTorch's transparent huge pages for CPU tensors of 2 MB and more
(``THP_MEM_ALLOC_ENABLE=1``, unless the environment sets it): a training step allocates its large gradients afresh
(a BERT word-embedding gradient is 47 MB), and with 4 kB pages the kernel's page faults cost more than the zeroing
(``benchmarks/padding_free.py``; ``THP_MEM_ALLOC_ENABLE=0`` turns it off). Child processes (workers, ranks) inherit it.
"""
import os

os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")

__version__ = "0.1.0"
