"""Model architectures: dense and MoE transformer specs, presets and Hugging Face configs."""
from model_specs.model_spec import MLASpec, ModelSpec, MoESpec

__all__ = ["MLASpec", "ModelSpec", "MoESpec"]
