"""Drafter training: the target's own responses to our prompts (data.py, prompts.py), the head
losses (loss.py), and the trainer and its CLI (main.py: `python -m engine train`)."""
