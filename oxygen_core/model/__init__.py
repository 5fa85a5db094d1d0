"""pi0.5 model parts (SigLIP, Gemma mixture of transformers), tokenizer and checkpoints."""
