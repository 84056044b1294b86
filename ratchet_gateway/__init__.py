"""Ratchet's data plane: the OpenAI-compatible gateway, plus the two local servers of the embedded default
(the student server and the demo teacher). Subpackages are imported where used; nothing is imported here."""
