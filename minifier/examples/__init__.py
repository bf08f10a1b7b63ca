"""Small real models that make AOTInductor fail, for the demo, the tests and the benchmark."""
