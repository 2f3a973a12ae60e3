"""Evaluation tools: experiments users run to check what pre-training gives."""
