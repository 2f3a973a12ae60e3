"""Tools that check electra-tf against other code: Hugging Face transformers, Model Garden's tokenizer, the original; and a mutation check of the test suite."""
