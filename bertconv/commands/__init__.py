"""One module per CLI command; each defines `command`."""

#: Command name -> (its module in bertconv.commands, which defines `ARGUMENTS` and `command`; the line
#: `bertconv --help` shows, the first of `command`'s docstring). A module is imported when its command
#: runs, so that `audit` does not wait for what `fill-mask` or `diff` import.
COMMANDS = {
    "inspect": ("inspect", "Show a checkpoint's format, config, tensors and ignored entries (reads headers only)."),
    "audit": ("audit", "Count parameters per component against the closed form from the config (reads no tensor "
                       "data)."),
    "convert": ("convert", "Convert SRC to DST in another (or the same) format, through the canonical tree."),
    "verify": ("verify", "Check that the MLM head is present, trained and its decoder tied, and that shapes agree "
                         "with the config."),
    "diff": ("diff", "Compare two checkpoints tensor by tensor in canonical space (any two formats)."),
    "fill-mask": ("fill_mask", "Predict every [MASK] in each TEXT with the checkpoint's MLM head."),
    "migrate-cache": ("migrate_cache", "Convert every cached repo whose weights are only tf_model.h5 or "
                                       "flax_model.msgpack to safetensors in OUT."),
}
