"""Tools that check electra-tf: against other code (Hugging Face transformers, Model Garden's
tokenizer, the original), against an earlier commit (identity_check), its test suite's strength
(a mutation check) and its reliability cases (reliability_replay, `make reliability`)."""
