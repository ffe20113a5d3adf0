"""Converters: PyTorch host ET + Kineto profile -> the trace model -> Chakra ET."""
