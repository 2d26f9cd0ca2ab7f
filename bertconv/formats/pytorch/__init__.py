"""Training checkpoints that `torch.load` reads, each in the layout of the library that saved it
(fair-esm's ESM-2, NVIDIA Megatron-LM's BERT), read with the safe unpickler: nothing in them is
ever called."""
