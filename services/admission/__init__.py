"""The admission service: the ordered chain of admission plugins, mutating then validating."""
