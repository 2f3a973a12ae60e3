"""Hugging Face parity: this project's outputs against transformers' PyTorch ELECTRA."""
