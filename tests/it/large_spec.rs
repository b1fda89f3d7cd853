//! Issue 25: tests of this part of large deployments (filled by its branch).
