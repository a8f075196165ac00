"""PyTorch modules and their accounting; knows nothing of data, training or storage."""

from glassroom.model.config import ModelConfig, MoEConfig, load_model_config

__all__ = ["ModelConfig", "MoEConfig", "load_model_config"]
