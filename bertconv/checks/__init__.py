"""Checks on a canonical tree: they see the tree, never a file format."""
