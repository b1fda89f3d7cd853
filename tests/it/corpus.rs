//! Integration tests: see the module's first test.
