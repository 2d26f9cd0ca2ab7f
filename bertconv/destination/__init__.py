"""What a conversion leaves at its destination: its output whole or not at all (`atomic`), with
the tokenizer files that travel with a checkpoint (`companions`)."""
