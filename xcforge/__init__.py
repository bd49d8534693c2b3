"""xcforge: one matrix, every engine backend of images/engine/ (one per kind of hardware), signed serving images."""

__version__ = "0.1.0"
