# a file a shell component names in tests/unit/test_multilang_schema.py (it only has to exist)
