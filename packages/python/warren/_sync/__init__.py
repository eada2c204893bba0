# Generated from the async client by packages/python/tools/generate.py: do not edit.
