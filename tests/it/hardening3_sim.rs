//! Issue 24 (hardening, third round): regression tests from its reproducers.
