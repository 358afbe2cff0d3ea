"""istar_plugin: I-STAR and isotropy measures for fine-tuning BERT-family encoders."""

__version__ = "0.1.0"
