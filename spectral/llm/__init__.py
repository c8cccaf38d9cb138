"""The synthesizer / LLM gateway seam shared by the cluster producer and the work executor."""
