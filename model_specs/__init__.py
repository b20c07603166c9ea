"""Model architectures: dense and MoE transformer specs, presets and Hugging Face configs."""
from model_specs.catalog import list_models, load_model, model_from_dict
from model_specs.hf_config import model_from_hf_config
from model_specs.model_spec import MLASpec, ModelSpec, MoESpec

__all__ = ["MLASpec", "ModelSpec", "MoESpec", "list_models", "load_model", "model_from_dict",
           "model_from_hf_config"]
