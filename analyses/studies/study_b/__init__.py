"""Study B, the grokked illusion: its settings and protocols, the protocol's steps (AdamW model,
WLMD sample, noise injection), its measurement and tables, its records, the diagnostics that
decided protocols 2-4, and its command group (`interp study-b`).
"""
