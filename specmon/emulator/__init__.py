"""An SGLang stand-in, launched like SGLang, for the demo and tests."""
