"""Dissection primitives on one model: interventions, patching, ablation, head and gradient measures."""
