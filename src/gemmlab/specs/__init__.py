"""Kernel specs as data, one module per ladder or family: what each kernel is (source, template
parameters, launch geometry, constraints). gemmlab.registry lists them; gemmlab.configs chooses
among them."""
