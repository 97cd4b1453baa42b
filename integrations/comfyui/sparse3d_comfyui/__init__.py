"""sparse3d for ComfyUI: TRELLIS.2's flow models served by the sparse3d engine.

Put this folder into ComfyUI/custom_nodes (README.md). It imports without sparse3d_engine and
without torch; its nodes then raise one error saying what to install.
"""
from .nodes import NODE_CLASS_MAPPINGS, NODE_DISPLAY_NAME_MAPPINGS, PIPELINE_TYPES

__all__ = ["NODE_CLASS_MAPPINGS", "NODE_DISPLAY_NAME_MAPPINGS", "PIPELINE_TYPES"]
