"""The shipped language model (``lowbit-tiny``), its loader, evaluation and training."""
