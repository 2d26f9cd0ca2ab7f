"""Byte-level codecs of checkpoint containers. They know files, not models."""
